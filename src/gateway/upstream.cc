#include "gateway/upstream.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "common/thread_name.h"

namespace drover::gateway {
namespace {

router::RouterOptions RouterOptionsFor(const ListenerConfig& l) {
  router::RouterOptions o;
  o.slow_start.window = l.policy == Policy::kP2c ? l.slow_start : Duration::zero();
  o.slow_start.min_weight_percent = l.slow_start_min_percent;
  o.build_ring = l.policy == Policy::kHash && l.hash == HashKind::kRing;
  o.build_maglev = l.policy == Policy::kHash && l.hash == HashKind::kMaglev;
  return o;
}

bool Excluded(const std::vector<std::size_t>& exclude, std::size_t i) {
  return std::find(exclude.begin(), exclude.end(), i) != exclude.end();
}

// Loads for a pick: excluded instances look full, so every picker passes them by.
constexpr std::uint64_t kExcludedLoad = std::uint64_t{1} << 40;
constexpr auto kHotKeyRefresh = std::chrono::milliseconds(250);

}  // namespace

Upstream::Upstream(const ListenerConfig& listener)
    : listener_(listener),
      router_(RouterOptionsFor(listener)),
      hot_keys_(router::HotKeyPolicy{
          .fraction = listener.policy == Policy::kHash ? listener.hot_key_fraction : 0,
          .owners = static_cast<std::uint32_t>(std::max(listener.hot_key_owners, 1))}) {
  auto empty = std::make_shared<UpstreamSnapshot>();
  empty->router = router_.Snapshot();
  current_.Store(std::move(empty));
}

Result<std::unique_ptr<Upstream>> Upstream::Start(const GatewayConfig& gateway,
                                                  const ListenerConfig& listener, Clock& clock) {
  std::unique_ptr<Upstream> up(new Upstream(listener));
  up->clock_ = &clock;
  DiscoveryOptions d;
  d.registry = gateway.registry;
  d.registry_ca = gateway.registry_ca;
  d.token = gateway.token;
  d.service = listener.service;
  d.max_stale = gateway.max_stale;
  auto discovery = DiscoveryClient::Start(d, clock);
  if (!discovery.ok()) return discovery.status();
  up->discovery_ = std::move(*discovery);
  Upstream* raw = up.get();
  up->thread_ = std::jthread([raw](std::stop_token stop) {
    NameThisThread("gw-discovery");
    raw->Run(stop);
  });
  return up;
}

std::unique_ptr<Upstream> Upstream::ForTables(const ListenerConfig& listener, Clock& /*clock*/) {
  return std::unique_ptr<Upstream>(new Upstream(listener));
}

Upstream::~Upstream() { Stop(); }

void Upstream::Stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
  if (discovery_) discovery_->Stop();
}

void Upstream::Run(std::stop_token stop) {
  std::uint64_t version = 0;  // of the last table applied
  std::uint64_t changes = 0;  // and the changes it held
  MonoTime hot_refreshed = clock_->Now();
  MonoTime stepped = clock_->Now();
  while (!stop.stop_requested()) {
    if (!Snapshot()->migration) {
      stepped = clock_->Now();
    } else if (clock_->Now() - stepped >= listener_.migration_step) {
      AdvanceMigration();
      stepped = clock_->Now();
    }
    if (hot_keys_.enabled() && clock_->Now() - hot_refreshed >= kHotKeyRefresh) {
      hot_keys_.Refresh();
      hot_refreshed = clock_->Now();
    }
    // Wakes at once on a new table; the timeout only bounds how late a stop is noticed. A table
    // of the revision already applied counts too: its events arrive one by one.
    discovery_->WaitForChange(version, changes, std::chrono::milliseconds(200));
    auto snapshot = discovery_->Snapshot();
    if (!snapshot.ok()) continue;
    if (snapshot->NewerThan(version, changes)) {
      version = snapshot->table->version();
      changes = snapshot->changes;
      Apply(snapshot->table);
    } else if (!Snapshot()->discovered) {
      MarkDiscovered();  // an empty registry (revision 0) is an answer too
    }
  }
}

void Upstream::Apply(std::shared_ptr<const router::RoutingTable> table) {
  MutexLock lock(apply_mu_);
  const std::shared_ptr<const router::RouterSnapshot> before = current_.Load()->router;
  const Status s = router_.Publish(table);
  if (!s.ok()) return;  // an older table: nothing to do
  auto next = std::make_shared<UpstreamSnapshot>();
  next->router = router_.Snapshot();
  next->discovered = true;
  if (listener_.policy == Policy::kHash && listener_.migration_steps > 1 &&
      before->table->size() > 0) {
    auto migration = std::make_shared<const router::KeyMigration>(
        before, next->router, static_cast<std::uint32_t>(listener_.migration_steps));
    next->migration = std::move(migration);
    next->migration_step = 1;
    spdlog::info(
        "gateway {}: table version {} -> {}: keys move in {} steps, one every {} ms",
        listener_.name, before->version(), table->version(), listener_.migration_steps,
        std::chrono::duration_cast<std::chrono::milliseconds>(listener_.migration_step).count());
  }
  std::map<std::string, std::shared_ptr<InstanceCounters>> kept;
  for (const router::Endpoint& e : table->endpoints()) {
    auto it = counters_.find(e.id);
    auto counters = it != counters_.end() ? it->second : std::make_shared<InstanceCounters>(e.id);
    next->counters.push_back(counters);
    next->pool_keys.push_back(e.id + "@" + e.address);
    kept.emplace(e.id, std::move(counters));
  }
  counters_ = std::move(kept);  // instances gone: their counters live on in their connections
  spdlog::debug("gateway {}: routing table version {} ({} instances)", listener_.name,
                table->version(), table->size());
  current_.Store(std::move(next));
}

bool Upstream::AdvanceMigration() {
  MutexLock lock(apply_mu_);
  const std::shared_ptr<const UpstreamSnapshot> now = current_.Load();
  if (!now->migration) return false;
  auto next = std::make_shared<UpstreamSnapshot>(*now);
  if (++next->migration_step > next->migration->steps()) {
    next->migration.reset();
    next->migration_step = 0;
    spdlog::info("gateway {}: key migration to table version {} done", listener_.name,
                 next->version());
  }
  current_.Store(std::move(next));
  return true;
}

void Upstream::MarkDiscovered() {
  MutexLock lock(apply_mu_);
  auto next = std::make_shared<UpstreamSnapshot>(*current_.Load());
  next->discovered = true;
  current_.Store(std::move(next));
}

void Upstream::ReportConnect(const UpstreamSnapshot& snapshot, std::size_t index, bool ok,
                             MonoTime now) {
  InstanceCounters& ic = *snapshot.counters[index];
  if (ok) {
    ic.connect_failures_in_row.store(0, std::memory_order_relaxed);
    // Well behaved for a long while since its last ejection: the backoff starts over.
    const std::int64_t until = ic.ejected_until.load(std::memory_order_relaxed);
    if (until != 0 &&
        now.time_since_epoch().count() - until >
            std::chrono::duration_cast<MonoClock::duration>(listener_.max_ejection).count()) {
      ic.ejections.store(0, std::memory_order_relaxed);
    }
    return;
  }
  const int in_row = ic.connect_failures_in_row.fetch_add(1, std::memory_order_relaxed) + 1;
  if (in_row < listener_.eject_after_failures || ic.Ejected(now)) return;
  // Never eject more than max_ejected_percent of the routable instances (at least one may go).
  const router::RoutingTable& table = *snapshot.router->table;
  std::size_t routable = 0, ejected = 0;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (!table.at(i).Routable()) continue;
    ++routable;
    ejected += snapshot.counters[i]->Ejected(now) ? 1 : 0;
  }
  const auto allowed =
      std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(routable) *
                                                        listener_.max_ejected_percent / 100));
  if (ejected + 1 > allowed) return;
  const std::uint32_t times = ic.ejections.fetch_add(1, std::memory_order_relaxed) + 1;
  Duration ejection = listener_.ejection;
  for (std::uint32_t k = 1; k < times && ejection < listener_.max_ejection; ++k) ejection *= 2;
  ejection = std::min(ejection, listener_.max_ejection);
  ic.ejected_until.store((now + ejection).time_since_epoch().count(), std::memory_order_relaxed);
  ic.connect_failures_in_row.store(0, std::memory_order_relaxed);
  ic.ejections_total.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("gateway {}: ejected {} for {:.1f} s after {} failures in a row (ejection {})",
               listener_.name, ic.id, std::chrono::duration<double>(ejection).count(), in_row,
               times);
}

void Upstream::ReportCheck(InstanceCounters& ic, bool ok) const {
  if (ok) {
    ic.check_failures_in_row.store(0, std::memory_order_relaxed);
    const int in_row = ic.check_successes_in_row.fetch_add(1, std::memory_order_relaxed) + 1;
    if (ic.unhealthy.load() && in_row >= listener_.healthy_threshold) {
      ic.unhealthy.store(false);
      spdlog::info("gateway {}: {} passes /ready again; routing to it", listener_.name, ic.id);
    }
    return;
  }
  ic.checks_failed.fetch_add(1, std::memory_order_relaxed);
  ic.check_successes_in_row.store(0, std::memory_order_relaxed);
  const int in_row = ic.check_failures_in_row.fetch_add(1, std::memory_order_relaxed) + 1;
  if (!ic.unhealthy.load() && in_row >= listener_.unhealthy_threshold) {
    ic.unhealthy.store(true);
    spdlog::warn("gateway {}: {} failed /ready {} times in a row; no new connections",
                 listener_.name, ic.id, in_row);
  }
}

bool Upstream::DiscoveryStale() const { return discovery_ && discovery_->Stale(); }

Duration Upstream::DiscoveryAge() const {
  return discovery_ ? discovery_->Age() : Duration::zero();
}

std::optional<DiscoveryStats> Upstream::DiscoveryFigures() const {
  if (!discovery_) return std::nullopt;
  return discovery_->Stats();
}

void Upstream::PassedOwners(const UpstreamSnapshot& snapshot, std::uint64_t key_hash,
                            router::RandomSource& random, std::vector<std::size_t>& passed) const {
  if (!hot_keys_.enabled()) return;
  // A rank never passes the last owner: the picker's key-eligible members, counted when it was
  // built (no walk of the table per keyed pick).
  const std::size_t members = router::KeyMembers(*snapshot.router);
  const std::uint32_t rank = hot_keys_.Rank(key_hash, static_cast<std::uint32_t>(members), random);
  for (std::uint32_t r = 0; r < rank; ++r) {
    const Result<std::size_t> owner = router::PickRanked(*snapshot.router, key_hash, r);
    if (!owner.ok()) return;
    if (std::find(passed.begin(), passed.end(), *owner) == passed.end()) {
      passed.push_back(*owner);
    }
  }
}

Result<std::size_t> Upstream::PickPassing(const UpstreamSnapshot& snapshot, std::uint64_t key_hash,
                                          const std::vector<std::size_t>& passed,
                                          const std::vector<std::size_t>& tried, MonoTime now,
                                          router::RandomSource& random,
                                          std::vector<std::size_t>& scratch) const {
  if (passed.empty()) return Pick(snapshot, key_hash, tried, now, random);
  scratch.assign(passed.begin(), passed.end());
  scratch.insert(scratch.end(), tried.begin(), tried.end());
  Result<std::size_t> pick = Pick(snapshot, key_hash, scratch, now, random);
  if (pick.ok()) return pick;
  return Pick(snapshot, key_hash, tried, now, random);
}

Result<std::size_t> Upstream::Pick(const UpstreamSnapshot& snapshot, std::uint64_t key_hash,
                                   const std::vector<std::size_t>& exclude, MonoTime now,
                                   router::RandomSource& random) const {
  const router::RoutingTable& table = *snapshot.router->table;
  const std::size_t n = table.size();
  // Loads copied once: the counters move under our feet, a pick needs one consistent view. The
  // scratch vectors are the calling thread's, so a pick allocates nothing once they have grown.
  thread_local std::vector<std::uint64_t> loads;
  thread_local std::vector<std::uint8_t> sick;
  loads.assign(n, 0);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (Excluded(exclude, i)) {
      loads[i] = kExcludedLoad;
    } else {
      loads[i] = snapshot.counters[i]->active.load(std::memory_order_relaxed);
      if (table.at(i).Routable()) total += loads[i];
    }
  }
  // Instances failing active checks or ejected are passed over -- unless that is every routable
  // one: then health is ignored (panic routing), since refusing everyone helps no one.
  sick.assign(n, 0);
  bool any_well = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (!table.at(i).Routable()) continue;
    const InstanceCounters& ic = *snapshot.counters[i];
    sick[i] = ic.unhealthy.load(std::memory_order_relaxed) || ic.Ejected(now);
    any_well = any_well || !sick[i];
  }
  if (!any_well) std::fill(sick.begin(), sick.end(), 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (sick[i] && loads[i] != kExcludedLoad) {
      total -= loads[i];
      loads[i] = kExcludedLoad;
    }
  }
  const auto usable = [&](std::size_t i) {
    return table.at(i).Routable() && !Excluded(exclude, i) && !sick[i];
  };
  const auto unavailable = [&] {
    return UnavailableError("no routable instance of '" + listener_.service + "' (table version " +
                            std::to_string(table.version()) + ", " + std::to_string(n) +
                            " instances, " + std::to_string(exclude.size()) + " tried)");
  };

  switch (listener_.policy) {
    case Policy::kHash: {
      // A key not yet moved by a staged migration stays on its old owner while that one is
      // usable; a moved one goes where the new table (with bounded load) puts it.
      if (snapshot.migration) {
        const auto owners = snapshot.migration->Owner(key_hash, snapshot.migration_step);
        if (owners.ok() && owners->moving && !owners->previous && usable(owners->owner)) {
          return owners->owner;
        }
      }
      const router::LoadView view{loads, total};
      const router::BoundedLoadOptions bounded{listener_.bounded_load};
      Result<std::size_t> pick = snapshot.router->maglev
                                     ? snapshot.router->maglev->PickBounded(key_hash, view, bounded)
                                     : snapshot.router->ring->PickBounded(key_hash, view, bounded);
      if (pick.ok() && usable(*pick)) return pick;
      break;  // every owner excluded or full: the least-loaded usable one below
    }
    case Policy::kP2c: {
      Result<std::size_t> pick = snapshot.router->p2c.Pick(loads, now, random);
      if (pick.ok() && usable(*pick)) return pick;
      break;  // drew excluded instances: fall back to the least loaded of the rest
    }
    case Policy::kLeastConn:
      break;
  }
  // Least connections over the usable instances (ties: the first from a random offset).
  std::optional<std::size_t> best;
  const std::size_t offset = n == 0 ? 0 : random.Uniform(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (offset + k) % n;
    if (usable(i) && (!best || loads[i] < loads[*best])) best = i;
  }
  if (!best) return unavailable();
  return *best;
}

}  // namespace drover::gateway
