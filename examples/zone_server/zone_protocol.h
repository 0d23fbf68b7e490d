// The zone server's line protocol (a stand-in for a game zone server's session):
//   HELLO <player>  ->  WELCOME <instance>
//   PING            ->  PONG
//   QUIT            ->  BYE, then the server closes
//   anything else   ->  ERR <why>
// Lines end with "\n" (a preceding "\r" is ignored) and are at most 4096 bytes.
//
// Keyed zones (a gateway's hash listener: the client's "DROVER-KEY <key>" line picks the zone)
// keep per-key state, and when the gateway moves keys to a new zone in steps, the new zone is
// taking keys over from another. The pattern, with the SDK's router::KeyMigration
// (drover/router/migration.h) built from the previous and the current routing tables a
// DiscoveryClient for the zone's own service gives: when a key's first player arrives,
// KeyMigration::Owner(HashKey(key), step) names its `previous` owner once it has moved; the zone
// asks that one for the key's state (and serves from scratch when there is none: the previous
// owner left, or the key is new). This sample keeps no per-key state, so it has nothing to fetch.
#pragma once

#include <chrono>
#include <string>

#include "drover/host.h"

namespace drover::examples {

// Serves one session until the client leaves, sends QUIT, stays idle for `idle_timeout`, or the
// host cuts the socket at its drain deadline.
void ServeZoneSession(Session& session, const std::string& instance,
                      std::chrono::seconds idle_timeout = std::chrono::minutes(5));

}  // namespace drover::examples
