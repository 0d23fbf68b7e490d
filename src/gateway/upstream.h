// Upstream: one listener's view of its service -- the registry's instances (DiscoveryClient),
// the pickers built from them (router::Router) and per-instance counters -- and the pick.
//
// Threads: one control thread per Upstream waits for new discovery snapshots and publishes a new
// UpstreamSnapshot (router snapshot + counters aligned with its table); io threads Load() it once
// per connection and pick on it without locks. Counters live as long as anyone holds them, so a
// connection keeps counting against its instance after the instance left the table.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "drover/discovery.h"
#include "drover/hot_keys.h"
#include "drover/mutex.h"
#include "drover/router.h"
#include "gateway/config.h"

namespace drover::gateway {

// Counters and health of one instance, shared by every table version that lists it.
struct InstanceCounters {
  explicit InstanceCounters(std::string instance_id) : id(std::move(instance_id)) {}
  const std::string id;
  std::atomic<std::uint64_t> active{0};            // open proxied connections
  std::atomic<std::uint64_t> connections{0};       // connections made to it, ever
  std::atomic<std::uint64_t> requests{0};          // http: requests sent to it
  std::atomic<std::uint64_t> failed_requests{0};   // http: reset, timed out or answered 5xx
  std::atomic<std::uint64_t> connect_failures{0};  // connects that failed or timed out
  // Active health checks (written by the checker only): /ready failing past the threshold.
  std::atomic<bool> unhealthy{false};
  std::atomic<int> check_failures_in_row{0};
  std::atomic<int> check_successes_in_row{0};
  std::atomic<std::uint64_t> checks_failed{0};
  // Passive outlier ejection: consecutive connect failures eject for a backed-off time.
  std::atomic<int> connect_failures_in_row{0};
  std::atomic<std::int64_t> ejected_until{0};  // MonoTime ticks; 0: never ejected
  std::atomic<std::uint32_t> ejections{0};     // times ejected (the backoff exponent)
  std::atomic<std::uint64_t> ejections_total{0};

  bool Ejected(MonoTime now) const {
    return ejected_until.load(std::memory_order_relaxed) > now.time_since_epoch().count();
  }
};

struct UpstreamSnapshot {
  std::shared_ptr<const router::RouterSnapshot> router;
  std::vector<std::shared_ptr<InstanceCounters>> counters;  // per table index
  // Per table index: "id@address", the instance's key in the HTTP proxy's connection pools (an
  // id that comes back at another address never gets the old one's connections).
  std::vector<std::string> pool_keys;
  bool discovered = false;  // the registry has answered at least once
  // A staged key migration under way (hash policy): keys not yet moved stay on their old owner.
  // Null when none. `migration_step` counts 1..steps; each step is a snapshot of its own.
  std::shared_ptr<const router::KeyMigration> migration;
  std::uint32_t migration_step = 0;

  std::uint64_t version() const { return router->version(); }
};

class Upstream {
 public:
  // Starts following `listener.service` in the registry. The clock must outlive the upstream.
  static Result<std::unique_ptr<Upstream>> Start(const GatewayConfig& gateway,
                                                 const ListenerConfig& listener, Clock& clock);
  // For tests: an upstream whose tables are set by hand (no registry).
  static std::unique_ptr<Upstream> ForTables(const ListenerConfig& listener, Clock& clock);
  ~Upstream();  // Stop()
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  std::shared_ptr<const UpstreamSnapshot> Snapshot() const { return current_.Load(); }
  // Snapshot() for one io thread's requests: no lock and no shared write while nothing new was
  // published (router::Published::Reader). One per thread; must not outlive the upstream.
  using SnapshotReader = router::Published<UpstreamSnapshot>::Reader;
  SnapshotReader Reader() const { return SnapshotReader(current_); }

  // Picks a routable instance of `snapshot` by the listener's policy, never one in `exclude`
  // (table indices already tried for this connection). `key_hash` is used by the hash policy.
  // UNAVAILABLE when no routable instance is left.
  Result<std::size_t> Pick(const UpstreamSnapshot& snapshot, std::uint64_t key_hash,
                           const std::vector<std::size_t>& exclude, MonoTime now,
                           router::RandomSource& random) const;

  // Hot keys (policy hash with hot_key_fraction > 0; drover/hot_keys.h): every keyed connection
  // records its key; a connection of a hot key passes over the owners before a rank drawn for
  // it (PassedOwners appends them to `passed`, to be excluded from Pick as if tried), so the
  // key's connections spread over its first hot_key_owners owners. Nothing for a cold key. The
  // control thread refreshes the hot set about every 250 ms.
  void RecordKey(std::string_view key) { hot_keys_.Record(key); }
  void PassedOwners(const UpstreamSnapshot& snapshot, std::uint64_t key_hash,
                    router::RandomSource& random, std::vector<std::size_t>& passed) const;
  std::vector<router::HotKey> HotKeys() const { return hot_keys_.Hot(); }
  const router::HotKeyRouting& hot_keys() const { return hot_keys_; }

  // Pick() excluding `passed` (a hot key's lower-ranked owners) and `tried`; when that leaves
  // nothing, the passed owners are better than none: Pick() excluding `tried` alone. `scratch`
  // is the caller's, reused.
  Result<std::size_t> PickPassing(const UpstreamSnapshot& snapshot, std::uint64_t key_hash,
                                  const std::vector<std::size_t>& passed,
                                  const std::vector<std::size_t>& tried, MonoTime now,
                                  router::RandomSource& random,
                                  std::vector<std::size_t>& scratch) const;

  // Outcome of a connect to table instance `index` of `snapshot`: feeds outlier ejection.
  void ReportConnect(const UpstreamSnapshot& snapshot, std::size_t index, bool ok, MonoTime now);
  // Outcome of an active /ready check of `counters`: flips `unhealthy` at the thresholds.
  void ReportCheck(InstanceCounters& counters, bool ok) const;

  // Publishes `table` (tests, and the control thread). Older versions are ignored. A hash
  // listener whose members changed starts a staged migration from the previous table (one under
  // way is finished at once: its keys are where the previous table put them).
  void Apply(std::shared_ptr<const router::RoutingTable> table);
  // The migration's next step, published as a snapshot of its own; after the last, the plain
  // table. False when none was under way. The control thread calls it every migration_step.
  bool AdvanceMigration();

  // Discovery's staleness (RT-2), for metrics and the admin view; max() before the first answer.
  Duration DiscoveryAge() const;
  // Older than the gateway's max_stale (DiscoveryClient::Stale): routed on all the same.
  bool DiscoveryStale() const;
  // The discovery client's figures (the registry in use, connected, longest gap); empty in tests
  // without one.
  std::optional<DiscoveryStats> DiscoveryFigures() const;
  const ListenerConfig& listener() const { return listener_; }

  void Stop();

 private:
  explicit Upstream(const ListenerConfig& listener);
  void Run(std::stop_token stop);
  void MarkDiscovered();

  const ListenerConfig listener_;
  router::Router router_;
  router::HotKeyRouting hot_keys_;
  Clock* clock_ = nullptr;  // Start()'s (the control thread's hot-key refresh)
  std::unique_ptr<DiscoveryClient> discovery_;
  Mutex apply_mu_;  // serialises Apply()
  std::map<std::string, std::shared_ptr<InstanceCounters>> counters_ DROVER_GUARDED_BY(apply_mu_);
  router::Published<UpstreamSnapshot> current_;
  std::jthread thread_;
};

}  // namespace drover::gateway
