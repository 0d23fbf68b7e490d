// Registration of the `drover` subcommands. Each Add* function adds one subcommand to the app
// and stores what it needs to run in state owned by the app's callbacks. Subcommands only parse
// flags and YAML, build the part they run, and run it.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/config_file.h"

namespace drover::cli {

// `drover bench ...`: measurement runs that print a report.
void AddBenchCommands(CLI::App& app);

// `drover registry`: the discovery daemon.
void AddRegistryCommand(CLI::App& app);

// `drover gateway`: the TCP and HTTP gateway.
void AddGatewayCommand(CLI::App& app);

// `drover ctl ...`: list / services / watch / drain / deregister / register against a registry.
void AddCtlCommands(CLI::App& app);

// `drover agent` and `drover deploy` (rollout_cmd.cc).
void AddRolloutCommands(CLI::App& app);

// `drover demo`: everything on this machine, and the five incidents replayed.
void AddDemoCommand(CLI::App& app);

// `drover sample zone|whoami`: the sample servers the demo deploys.
void AddSampleCommands(CLI::App& app);

// Whether a flag ("--tick-ms") of `cmd` was given on the command line: the YAML readers let such
// a flag win over the file.
inline FlagGiven FlagGivenIn(const CLI::App& cmd) {
  return [&cmd](std::string_view flag) {
    const CLI::Option* option = cmd.get_option_no_throw(std::string(flag));
    return option != nullptr && option->count() > 0;
  };
}

// --registry for the commands that talk to a registry's HTTP API (ctl, deploy, rollout): the
// flag when given, else $DROVER_REGISTRY_URL when set, else `url`'s value (the default). The
// variable is read before parsing, so that the flag overwrites it and a --spec file's
// `registry:` (applied where no flag was given) does too: flag, file, variable, default.
inline CLI::Option* AddRegistryUrlOption(CLI::App& cmd, std::string& url) {
  cmd.preparse_callback([&url](std::size_t) {
    if (const char* env = std::getenv("DROVER_REGISTRY_URL"); env != nullptr && *env != '\0') {
      url = env;
    }
  });
  return cmd.add_option("--registry", url,
                        "The registry's URL, http://host:port or https://host:port; several of "
                        "one cluster comma-separated (the next is tried when one cannot be "
                        "reached). Default: $DROVER_REGISTRY_URL, else " +
                            url);
}

// The words after the first "--" of the command line: what `drover deploy` runs. main() takes
// them out before CLI11 parses the rest, because CLI11 2.1 still matches a word after "--"
// against the subcommand's options when that option was not given before it (`--registry` of
// the program taken as deploy's own).
struct AfterDoubleDash {
  bool given = false;              // there was a "--"
  std::vector<std::string> words;  // only `drover deploy` takes them; main refuses them elsewhere
};
inline AfterDoubleDash& WordsAfterDoubleDash() {
  static AfterDoubleDash after;
  return after;
}

}  // namespace drover::cli
