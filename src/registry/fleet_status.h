// FleetStatus: the registry's read-only window on the fleet's own parts, so that the dashboard
// finds every gateway and agent in the registry and shows their figures without reaching them
// itself -- from an HTTPS page, from a browser outside the fleet's network.
//
// Only registered parts, only fixed read paths, never a URL from the request:
//   drover-gateway/<id>  ->  <scheme>://<address>/admin/snapshot   (the gateway's admin port)
//   drover-agent/<id>    ->  <scheme>://<address>/v1/deploys       (the agent's deploy copies)
// where <address> is what the part registered and <scheme> its "scheme" label (http when absent).
// So the registry cannot be used to reach any other address, and the bodies it passes on are the
// ones those endpoints already serve to anyone who reaches them (CORS-open).
//
// Nothing blocks a request: Get() answers from what one background thread last fetched, and
// marks the part wanted; the thread fetches every wanted part each `interval`, and forgets a part
// nobody asked for during `interest`. The first Get() of a part is UNAVAILABLE ("fetching") and
// wakes the thread at once; the page's next poll has the answer.
//
// Thread-safe. The Registry must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>

#include "drover/clock.h"
#include "drover/mutex.h"
#include "drover/status.h"

namespace drover::registry {

class Registry;

struct FleetStatusOptions {
  Duration interval = std::chrono::seconds(1);
  Duration interest = std::chrono::seconds(15);
  std::chrono::seconds timeout{2};  // each fetch
  std::string ca_file;              // PEM CAs for parts registered with scheme https
  std::size_t max_parts = 256;      // wanted at once; beyond: RESOURCE_EXHAUSTED
};

struct FleetAnswer {
  int status = 0;    // the part's HTTP status
  std::string body;  // its body, as it sent it
  std::string url;   // what was fetched
  Duration age{};    // how long ago
};

class FleetStatus {
 public:
  FleetStatus(const Registry& registry, FleetStatusOptions options);
  ~FleetStatus();  // stops and joins the thread
  FleetStatus(const FleetStatus&) = delete;
  FleetStatus& operator=(const FleetStatus&) = delete;

  // The last answer of part `service`/`id`. INVALID_ARGUMENT for a service that is not a fleet
  // part; NOT_FOUND when no such part is registered; UNAVAILABLE while the first fetch is pending
  // or when the last one failed (the message says why, naming the URL).
  Result<FleetAnswer> Get(const std::string& service, const std::string& id);

 private:
  struct Part {
    MonoTime wanted_until{};
    bool fetched = false;
    FleetAnswer answer;
    MonoTime fetched_at{};
    std::string error;  // the last fetch's failure; empty when it answered
  };
  using Key = std::pair<std::string, std::string>;

  void Run(std::stop_token stop);
  // One fetch; fills `part` (under no lock: a copy).
  void Fetch(const Key& key, Part& part) const;

  const Registry& registry_;
  const FleetStatusOptions options_;
  Mutex mu_;
  CondVar wake_;
  std::map<Key, Part> parts_ DROVER_GUARDED_BY(mu_);
  bool pending_ DROVER_GUARDED_BY(mu_) = false;  // a part waits for its first fetch
  std::jthread thread_;                          // last: stopped and joined first
};

}  // namespace drover::registry
