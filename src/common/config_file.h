// The YAML files Drover reads next to its command-line flags (`drover registry --config`,
// `drover deploy --spec`): the steps every reader shares. Each part's reader is a pure function
// beside the part it configures -- text in, settings out, a Status for anything wrong, never an
// exception -- so that it is fuzzed apart from the command line (tests/fuzz/cli_config_fuzz.cc).
// Keys are the long flag names with '_' for '-'; a setting whose flag was given on the command
// line keeps the flag's value; an unknown key is an error, not a silent default.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"

namespace drover {

// Whether a flag ("--tick-ms") was given on the command line.
using FlagGiven = std::function<bool(std::string_view flag)>;

// The whole file, or INVALID_ARGUMENT naming it.
Result<std::string> ReadConfigFile(const std::string& path);

// The mapping at the top of `yaml`, or INVALID_ARGUMENT prefixed with `source`.
Result<YAML::Node> LoadYamlMapping(const std::string& yaml, const std::string& source);

// "tick_ms" -> "--tick-ms".
std::string FlagOfKey(const std::string& key);

// A YAML sequence of strings, or one string as a list of one; throws YAML::Exception otherwise.
std::vector<std::string> StringOrList(const YAML::Node& node);

}  // namespace drover
