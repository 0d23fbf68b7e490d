#include "gateway/upstream.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

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

}  // namespace

Upstream::Upstream(const ListenerConfig& listener, Clock& clock)
    : listener_(listener), clock_(clock), router_(RouterOptionsFor(listener)) {
  auto empty = std::make_shared<UpstreamSnapshot>();
  empty->router = router_.Snapshot();
  current_.Store(std::move(empty));
}

Result<std::unique_ptr<Upstream>> Upstream::Start(const GatewayConfig& gateway,
                                                  const ListenerConfig& listener, Clock& clock) {
  std::unique_ptr<Upstream> up(new Upstream(listener, clock));
  DiscoveryOptions d;
  d.registry = gateway.registry;
  d.token = gateway.token;
  d.service = listener.service;
  auto discovery = DiscoveryClient::Start(d, clock);
  if (!discovery.ok()) return discovery.status();
  up->discovery_ = std::move(*discovery);
  Upstream* raw = up.get();
  up->thread_ = std::jthread([raw](std::stop_token stop) { raw->Run(stop); });
  return up;
}

std::unique_ptr<Upstream> Upstream::ForTables(const ListenerConfig& listener, Clock& clock) {
  return std::unique_ptr<Upstream>(new Upstream(listener, clock));
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
  std::uint64_t version = 0;
  while (!stop.stop_requested()) {
    // Wakes at once on a new revision; the timeout only bounds how late a stop is noticed.
    discovery_->WaitForRevision(version + 1, std::chrono::milliseconds(200));
    auto snapshot = discovery_->Snapshot();
    if (!snapshot.ok()) continue;
    if (snapshot->table->version() > version) {
      version = snapshot->table->version();
      Apply(snapshot->table);
    } else if (!Snapshot()->discovered) {
      MarkDiscovered();  // an empty registry (revision 0) is an answer too
    }
  }
}

void Upstream::Apply(std::shared_ptr<const router::RoutingTable> table) {
  std::lock_guard lock(apply_mu_);
  const Status s = router_.Publish(table);
  if (!s.ok()) return;  // an older table: nothing to do
  auto next = std::make_shared<UpstreamSnapshot>();
  next->router = router_.Snapshot();
  next->discovered = true;
  std::map<std::string, std::shared_ptr<InstanceCounters>> kept;
  for (const router::Endpoint& e : table->endpoints()) {
    auto it = counters_.find(e.id);
    auto counters = it != counters_.end() ? it->second : std::make_shared<InstanceCounters>(e.id);
    next->counters.push_back(counters);
    kept.emplace(e.id, std::move(counters));
  }
  counters_ = std::move(kept);  // instances gone: their counters live on in their connections
  spdlog::debug("gateway {}: routing table version {} ({} instances)", listener_.name,
                table->version(), table->size());
  current_.Store(std::move(next));
}

void Upstream::MarkDiscovered() {
  std::lock_guard lock(apply_mu_);
  auto next = std::make_shared<UpstreamSnapshot>(*current_.Load());
  next->discovered = true;
  current_.Store(std::move(next));
}

Duration Upstream::DiscoveryAge() const {
  return discovery_ ? discovery_->Age() : Duration::zero();
}

Result<std::size_t> Upstream::Pick(const UpstreamSnapshot& snapshot, std::uint64_t key_hash,
                                   const std::vector<std::size_t>& exclude, MonoTime now,
                                   router::RandomSource& random) const {
  const router::RoutingTable& table = *snapshot.router->table;
  const std::size_t n = table.size();
  // Loads copied once: the counters move under our feet, a pick needs one consistent view.
  std::vector<std::uint64_t> loads(n);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (Excluded(exclude, i)) {
      loads[i] = kExcludedLoad;
    } else {
      loads[i] = snapshot.counters[i]->active.load(std::memory_order_relaxed);
      if (table.at(i).Routable()) total += loads[i];
    }
  }
  const auto usable = [&](std::size_t i) {
    return table.at(i).Routable() && !Excluded(exclude, i);
  };
  const auto unavailable = [&] {
    return UnavailableError("no routable instance of '" + listener_.service + "' (table version " +
                            std::to_string(table.version()) + ", " + std::to_string(n) +
                            " instances, " + std::to_string(exclude.size()) + " tried)");
  };

  switch (listener_.policy) {
    case Policy::kHash: {
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
