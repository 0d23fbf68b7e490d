#include "common/config_file.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace drover {

Result<std::string> ReadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Result<YAML::Node> LoadYamlMapping(const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(source + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) return InvalidArgumentError(source + ": expected a mapping");
  return root;
}

std::string FlagOfKey(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::vector<std::string> StringOrList(const YAML::Node& node) {
  if (node.IsSequence()) return node.as<std::vector<std::string>>();
  return {node.as<std::string>()};
}

}  // namespace drover
