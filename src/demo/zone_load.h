// ZoneLoad: a load generator that speaks the zone protocol (examples/zone_server) -- the
// "players" of the demo and of the gateway's end-to-end test.
//
// Opens sessions at a fixed rate; each connects, sends HELLO, expects "WELCOME <instance>",
// holds the session for `hold` sending PING every `ping_every` (expects PONG), then QUIT/BYE.
// Every session's outcome is recorded with the instance that served it, so a test can count
// failures and each instance's share of new sessions over time.
//
// Threads: one io thread of its own. Start() once; Stop() stops opening sessions and waits (up to
// `hold` + timeouts) for the open ones to end. records(): the sessions ended so far (any time).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drover/clock.h"

namespace drover::demo {

struct ZoneLoadOptions {
  std::string target = "127.0.0.1:7000";  // IPv4 host:port
  double sessions_per_second = 100;
  Duration hold = std::chrono::seconds(2);
  Duration ping_every = std::chrono::milliseconds(500);
  Duration timeout = std::chrono::seconds(5);  // connect and each answer
  std::string key_prefix;  // non-empty: send "DROVER-KEY <prefix><n>" first (hash listeners)
};

enum class SessionOutcome {
  kOk,             // WELCOME, every PONG, BYE
  kConnectFailed,  // refused or timed out
  kNoWelcome,      // connected but closed (or garbage) before WELCOME: the gateway found no one
  kBroken,         // WELCOME, then reset/closed/timed out before BYE
};

std::string_view SessionOutcomeName(SessionOutcome outcome);

struct SessionRecord {
  MonoTime started{};
  SessionOutcome outcome = SessionOutcome::kOk;
  std::string instance;  // from WELCOME; empty if none
};

class ZoneLoad {
 public:
  explicit ZoneLoad(ZoneLoadOptions options);
  ~ZoneLoad();  // Stop()
  ZoneLoad(const ZoneLoad&) = delete;
  ZoneLoad& operator=(const ZoneLoad&) = delete;

  void Start();
  void Stop();
  std::vector<SessionRecord> records() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace drover::demo
