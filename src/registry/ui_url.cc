#include "registry/ui_url.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace drover::registry {

Status ValidateUiUrl(std::string_view url) {
  std::string_view rest = url;
  if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
  } else if (rest.rfind("https://", 0) == 0) {
    rest.remove_prefix(8);
  } else {
    return InvalidArgumentError("dashboard URL '" + std::string(url) +
                                "' must start with http:// or https://");
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const bool clean = !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
           c == '[' || c == ']' || c == '_';
  });
  if (!clean) {
    return InvalidArgumentError("dashboard URL '" + std::string(url) +
                                "' must be scheme://host[:port] with no path");
  }
  return Status::Ok();
}

}  // namespace drover::registry
