// The dashboard's gateway and agent URLs (HttpOptions::ui_gateways / ui_agents), checked where
// they are given: flags, the registry's config file, HttpServer::Start.
#pragma once

#include <string_view>

#include "drover/status.h"

namespace drover::registry {

// OK when `url` can go into ui_gateways / ui_agents: http:// or https://, a host, an optional
// port, nothing else (no path, query, credentials or spaces). A trailing '/' is allowed.
Status ValidateUiUrl(std::string_view url);

}  // namespace drover::registry
