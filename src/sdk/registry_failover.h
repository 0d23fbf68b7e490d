// RegistryFailover: which of a client's registry endpoints it talks to now, and how long it waits
// before the next try (the failover half of "registry endpoints as a list"; no gRPC, so the
// rules are unit-tested and run under ThreadSanitizer).
//
// A client keeps one connection at a time, to the current endpoint. A call that fails in a way
// another registry may not (MayWorkElsewhere: UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED by the
// peer) reports Failed(): the client moves to the next endpoint at once while the current run of
// failures has not yet reached every endpoint, and backs off once it has -- `min_backoff`
// doubling per round up to `max_backoff`, each wait drawn in [wait/2, wait] (jitter, so that a
// fleet that lost its registry does not come back in step). A success resets the run.
//
// With the etcd store every registry serves the same data at the same revisions, so a write is
// retried on the next endpoint with the same generation (fencing makes the retry safe) and a
// watch resumes there from its last revision. With one endpoint, failover is only the capped
// backoff: a restarted registry is reached again within `max_backoff`.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "drover/mutex.h"
#include "drover/status.h"

namespace drover::sdk {

struct RegistryFailoverOptions {
  Duration min_backoff = std::chrono::milliseconds(100);
  Duration max_backoff = std::chrono::seconds(1);  // also gRPC's reconnect backoff cap
};

// A failure a call to another registry (or a later call to the same one) may not have:
// the registry is down, unreachable, too slow, or shutting down.
bool MayWorkElsewhere(StatusCode code);

class RegistryFailover {
 public:
  // `endpoints`: the addresses, for logs; at least one.
  explicit RegistryFailover(std::vector<std::string> endpoints,
                            RegistryFailoverOptions options = {});

  std::size_t size() const { return endpoints_.size(); }
  const std::string& endpoint(std::size_t index) const { return endpoints_[index]; }
  // Every endpoint, comma-separated, as configured.
  std::string names() const;

  // The endpoint to use now.
  std::size_t current() const;
  // The call on `index` failed with `why`. When `index` is still current, moves to the next
  // endpoint; a caller that used an endpoint another caller already left changes nothing.
  // Returns how long to wait before trying current(): zero while untried endpoints remain in
  // this run of failures, else the backoff.
  Duration Failed(std::size_t index, const Status& why);
  // The call on `index` succeeded: the run of failures is over.
  void Succeeded(std::size_t index);
  // Whether every endpoint failed since the last success (the registry is away, for this client).
  bool AllFailing() const;

 private:
  const std::vector<std::string> endpoints_;
  const RegistryFailoverOptions options_;
  mutable Mutex mu_;
  std::size_t current_ DROVER_GUARDED_BY(mu_) = 0;
  std::size_t failures_ DROVER_GUARDED_BY(mu_) = 0;  // in a row, since the last success
  Duration backoff_ DROVER_GUARDED_BY(mu_);
  MonoTime outage_since_ DROVER_GUARDED_BY(mu_){};
  std::minstd_rand random_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::sdk
