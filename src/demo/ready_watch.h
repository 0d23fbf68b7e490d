// ReadyWatch: the demo's view of which instances the registry holds READY, and since when.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "drover/clock.h"
#include "drover/mutex.h"
#include "net/http_client.h"

namespace drover::demo {

// When each instance of the watched services was first seen READY and accepting in the registry
// (polled every 100 ms on a thread of its own), and which are now.
class ReadyWatch {
 public:
  ReadyWatch(net::HttpClient registry, std::vector<std::string> services);
  ~ReadyWatch();

  // The first time `id` was seen READY; nullopt if never.
  std::optional<MonoTime> ReadySince(const std::string& id) const;
  std::set<std::string> ReadyNow(const std::string& service) const;
  // Waits until every id has been seen READY; false at the deadline or on stop.
  bool WaitReady(const std::vector<std::string>& ids, Duration limit, std::stop_token stop) const;

 private:
  void Poll(std::stop_token stop);

  net::HttpClient registry_;
  std::vector<std::string> services_;
  mutable Mutex mu_;
  std::map<std::string, MonoTime> first_ready_ DROVER_GUARDED_BY(mu_);
  std::map<std::string, std::set<std::string>> ready_now_ DROVER_GUARDED_BY(mu_);
  std::jthread poller_;
};

}  // namespace drover::demo
