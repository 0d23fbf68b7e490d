// `drover registry --config registry.yaml`: the daemon's settings from YAML (common/config_file.h
// says how every such reader behaves). Keys: store, data_dir, etcd_endpoints, etcd_prefix,
// etcd_session_ttl, http, grpc, auth_tokens, tick_ms, self_preservation, tls_cert, tls_key,
// max_connections, max_watches_per_client, max_watches, write_rate, write_burst,
// total_write_rate, max_body, ui_gateways and
// ui_agents (a list, or one string; their flags are the singular --ui-gateway and --ui-agent).
#pragma once

#include <string>

#include "common/config_file.h"
#include "registry/daemon.h"

namespace drover::registry {

// Fills every setting of `options` whose flag was not given from `yaml`, and checks ranges;
// `source` (the file name) prefixes every error.
Status ApplyDaemonConfig(const std::string& yaml, const std::string& source, const FlagGiven& given,
                         DaemonOptions& options);

}  // namespace drover::registry
