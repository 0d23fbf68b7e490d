// The zone server's line protocol (a stand-in for a game zone server's session):
//   HELLO <player>  ->  WELCOME <instance>
//   PING            ->  PONG
//   QUIT            ->  BYE, then the server closes
//   anything else   ->  ERR <why>
// Lines end with "\n" (a preceding "\r" is ignored) and are at most 4096 bytes.
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
