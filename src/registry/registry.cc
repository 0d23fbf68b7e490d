#include "registry/registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace drover::registry {
namespace {

Duration Ttl(const InstanceSpec& spec) { return std::chrono::milliseconds(spec.ttl_ms); }

std::string Path(const std::string& service, const std::string& id) { return service + "/" + id; }

Write PutInstance(const Instance& instance, bool create, std::optional<std::uint64_t> expect) {
  Write w;
  w.kind = Write::Kind::kPutInstance;
  w.service = instance.service;
  w.id = instance.id;
  w.instance = instance;
  w.create = create;
  w.expect_mod_revision = expect;
  return w;
}

Write DeleteInstance(const Instance& instance) {
  Write w;
  w.kind = Write::Kind::kDeleteInstance;
  w.service = instance.service;
  w.id = instance.id;
  w.expect_mod_revision = instance.mod_revision;
  return w;
}

Write PutTombstone(const Tombstone& tombstone) {
  Write w;
  w.kind = Write::Kind::kPutTombstone;
  w.service = tombstone.service;
  w.id = tombstone.id;
  w.tombstone = tombstone;
  return w;
}

Write DeleteTombstone(const std::string& service, const std::string& id) {
  Write w;
  w.kind = Write::Kind::kDeleteTombstone;
  w.service = service;
  w.id = id;
  return w;
}

Event PutEvent(const Instance& instance) {
  Event e;
  e.type = EventType::kPut;
  e.revision = instance.mod_revision;
  e.instance = instance;
  return e;
}

Event DeleteEvent(const Instance& instance, std::uint64_t revision, RemovalReason reason) {
  Event e;
  e.type = EventType::kDelete;
  e.revision = revision;
  e.instance = instance;
  e.reason = reason;
  return e;
}

// READY since now when the state turns READY, kept while it stays READY, cleared otherwise.
SystemTime ReadySince(const Instance* before, InstanceState after, SystemTime now) {
  if (after != InstanceState::kReady) return SystemTime{};
  if (before != nullptr && before->spec.state == InstanceState::kReady) return before->ready_since;
  return now;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Watcher

Result<std::vector<EventPtr>> Watcher::NextShared(std::chrono::milliseconds timeout,
                                                  std::stop_token stop) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, stop, timeout, [&] { return cancelled_ || !queue_.empty(); });
  if (cancelled_ || stop.stop_requested()) return Status(StatusCode::kCancelled, "watch cancelled");
  std::vector<EventPtr> events(std::make_move_iterator(queue_.begin()),
                               std::make_move_iterator(queue_.end()));
  queue_.clear();
  return events;
}

Result<std::vector<Event>> Watcher::Next(std::chrono::milliseconds timeout, std::stop_token stop) {
  DROVER_ASSIGN_OR_RETURN(std::vector<EventPtr> shared, NextShared(timeout, std::move(stop)));
  std::vector<Event> events;
  events.reserve(shared.size());
  for (const EventPtr& e : shared) events.push_back(*e);
  return events;
}

void Watcher::Cancel() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    queue_.clear();
    // Wake an asynchronous consumer so that it notices the cancellation.
    if (listener_) listener_();
    listener_ = nullptr;
  }
  cv_.notify_all();
}

void Watcher::SetListener(std::function<void()> listener) {
  std::function<void()> call_now;
  {
    std::lock_guard lock(mu_);
    if (cancelled_) return;
    listener_ = std::move(listener);
    // Events queued before the listener was set would otherwise wait for the next one.
    if (!queue_.empty()) call_now = listener_;
  }
  if (call_now) call_now();
}

// ---------------------------------------------------------------------------------------------
// Registry: opening

Result<std::unique_ptr<Registry>> Registry::Open(std::unique_ptr<Store> store, Clock& clock,
                                                 RegistryOptions options) {
  DROVER_ASSIGN_OR_RETURN(StoreState state, store->Load());
  std::unique_ptr<Registry> registry(new Registry(std::move(store), clock, std::move(options)));
  const MonoTime now = clock.Now();
  registry->revision_ = state.revision;
  // Events from before this process are not retained: a watcher resuming from an older
  // revision gets a RESYNC.
  registry->history_floor_ = state.revision;
  for (Instance& in : state.instances) {
    const Duration ttl = Ttl(in.spec);
    auto& entry = registry->services_[in.service].instances[in.id];
    entry.instance = std::move(in);
    // A fresh lease for everyone: while the registry was down nobody could heartbeat.
    entry.lease_deadline = now + ttl;
  }
  for (Tombstone& t : state.tombstones) {
    Key key{t.service, t.id};
    registry->tombstones_[std::move(key)] = std::move(t);
  }
  spdlog::info("registry: opened at revision {} with {} services, {} tombstones", state.revision,
               registry->services_.size(), registry->tombstones_.size());
  return registry;
}

// ---------------------------------------------------------------------------------------------
// Writes

Status Registry::ValidateKey(const std::string& service, const std::string& id) const {
  DROVER_RETURN_IF_ERROR(ValidateName("service", service, options_.limits));
  return ValidateName("instance id", id, options_.limits);
}

Status Registry::Fenced(const std::string& service, const std::string& id, std::uint64_t generation,
                        std::uint64_t newest) const {
  return Status(StatusCode::kAborted,
                "fenced: " + Path(service, id) + " generation " + std::to_string(generation) +
                    " is older than generation " + std::to_string(newest) + " already seen");
}

Result<Registry::Entry*> Registry::FindForWrite(const std::string& service, const std::string& id,
                                                std::uint64_t generation) {
  auto svc = services_.find(service);
  if (svc != services_.end()) {
    auto it = svc->second.instances.find(id);
    if (it != svc->second.instances.end()) {
      const std::uint64_t current = it->second.instance.spec.generation;
      if (generation < current) return Fenced(service, id, generation, current);
      if (generation > current) {
        return FailedPreconditionError(Path(service, id) + " is registered at generation " +
                                       std::to_string(current) + "; register generation " +
                                       std::to_string(generation) + " first");
      }
      return &it->second;
    }
  }
  auto tomb = tombstones_.find(Key{service, id});
  if (tomb != tombstones_.end() && generation <= tomb->second.generation) {
    return Status(StatusCode::kAborted, "fenced: " + Path(service, id) + " generation " +
                                            std::to_string(generation) +
                                            " was removed (tombstone at generation " +
                                            std::to_string(tomb->second.generation) + ")");
  }
  return NotFoundError(Path(service, id) + " is not registered");
}

Result<std::uint64_t> Registry::Register(const std::string& service, const std::string& id,
                                         const InstanceSpec& spec) {
  DROVER_RETURN_IF_ERROR(ValidateKey(service, id));
  DROVER_RETURN_IF_ERROR(ValidateSpec(spec, options_.limits).WithContext(Path(service, id)));
  std::lock_guard lock(mu_);
  const MonoTime now = clock_.Now();
  const SystemTime system_now = clock_.SystemNow();

  auto tomb = tombstones_.find(Key{service, id});
  if (tomb != tombstones_.end() && spec.generation <= tomb->second.generation) {
    return Status(StatusCode::kAborted,
                  "fenced: " + Path(service, id) + " was removed at generation " +
                      std::to_string(tomb->second.generation) +
                      "; a restarted instance must register with a higher generation");
  }

  Entry* existing = nullptr;
  if (auto svc = services_.find(service); svc != services_.end()) {
    if (auto it = svc->second.instances.find(id); it != svc->second.instances.end()) {
      existing = &it->second;
    }
  }

  Instance next;
  next.service = service;
  next.id = id;
  next.spec = spec;
  std::vector<Write> writes;
  bool replaces_incarnation = false;
  if (existing != nullptr) {
    const Instance& cur = existing->instance;
    if (spec.generation < cur.spec.generation) {
      return Fenced(service, id, spec.generation, cur.spec.generation);
    }
    if (spec.generation == cur.spec.generation) {
      // Re-registration of the same incarnation: an update that cannot undo a drain.
      if (cur.spec.state == InstanceState::kDraining) next.spec.state = InstanceState::kDraining;
      next.create_revision = cur.create_revision;
      next.ready_since = ReadySince(&cur, next.spec.state, system_now);
      if (next.spec == cur.spec) {
        existing->lease_deadline = now + Ttl(next.spec);
        return revision_;
      }
      writes.push_back(PutInstance(next, /*create=*/false, cur.mod_revision));
    } else {
      replaces_incarnation = true;
      next.ready_since = ReadySince(nullptr, next.spec.state, system_now);
      writes.push_back(PutInstance(next, /*create=*/true, cur.mod_revision));
    }
  } else {
    next.ready_since = ReadySince(nullptr, next.spec.state, system_now);
    writes.push_back(PutInstance(next, /*create=*/true, /*expect=*/0));
    if (tomb != tombstones_.end()) writes.push_back(DeleteTombstone(service, id));
  }

  DROVER_ASSIGN_OR_RETURN(const std::uint64_t rev, store_->Commit(writes));
  revision_ = rev;
  next.mod_revision = rev;
  if (writes.front().create) next.create_revision = rev;
  std::vector<Event> events;
  if (replaces_incarnation) {
    events.push_back(DeleteEvent(existing->instance, rev, RemovalReason::kFence));
  }
  events.push_back(PutEvent(next));
  if (tomb != tombstones_.end()) tombstones_.erase(tomb);
  Entry& entry = services_[service].instances[id];
  entry.instance = std::move(next);
  entry.lease_deadline = now + Ttl(spec);
  Publish(std::move(events));
  return rev;
}

Result<std::uint64_t> Registry::Heartbeat(const std::string& service, const std::string& id,
                                          std::uint64_t generation) {
  std::lock_guard lock(mu_);
  DROVER_RETURN_IF_ERROR(RenewLocked(service, id, generation, clock_.Now()));
  return revision_;
}

std::uint64_t Registry::HeartbeatAll(const std::vector<LeaseRenewal>& renewals,
                                     std::vector<Status>& results) {
  results.clear();
  results.reserve(renewals.size());
  std::lock_guard lock(mu_);
  const MonoTime now = clock_.Now();
  for (const LeaseRenewal& r : renewals) {
    results.push_back(RenewLocked(r.service, r.id, r.generation, now));
  }
  return revision_;
}

Status Registry::RenewLocked(const std::string& service, const std::string& id,
                             std::uint64_t generation, MonoTime now) {
  DROVER_RETURN_IF_ERROR(ValidateKey(service, id));
  DROVER_ASSIGN_OR_RETURN(Entry * entry, FindForWrite(service, id, generation));
  entry->lease_deadline = now + Ttl(entry->instance.spec);
  return Status::Ok();
}

Result<std::uint64_t> Registry::SetState(const std::string& service, const std::string& id,
                                         std::uint64_t generation,
                                         std::optional<InstanceState> state,
                                         std::optional<bool> accepting) {
  DROVER_RETURN_IF_ERROR(ValidateKey(service, id));
  std::lock_guard lock(mu_);
  DROVER_ASSIGN_OR_RETURN(Entry * entry, FindForWrite(service, id, generation));
  const Instance& cur = entry->instance;
  if (state && cur.spec.state == InstanceState::kDraining && *state != InstanceState::kDraining) {
    // Drain is sticky intent (REG-1): the same incarnation cannot become routable again. A
    // restarted process registers a new generation instead.
    return FailedPreconditionError(Path(service, id) + " is DRAINING; generation " +
                                   std::to_string(generation) + " cannot return to " +
                                   std::string(InstanceStateName(*state)) +
                                   " (register a new generation)");
  }
  Instance next = cur;
  if (state) next.spec.state = *state;
  if (accepting) next.spec.accepting = *accepting;
  next.ready_since = ReadySince(&cur, next.spec.state, clock_.SystemNow());
  // A state change is a sign of life and renews the lease -- once it is accepted.
  const MonoTime renewed = clock_.Now() + Ttl(cur.spec);
  if (next.spec == cur.spec) {
    entry->lease_deadline = renewed;
    return revision_;
  }
  DROVER_ASSIGN_OR_RETURN(const std::uint64_t rev,
                          store_->Commit({PutInstance(next, false, cur.mod_revision)}));
  revision_ = rev;
  next.mod_revision = rev;
  entry->instance = next;
  entry->lease_deadline = renewed;
  Publish({PutEvent(next)});
  return rev;
}

Result<std::uint64_t> Registry::Deregister(const std::string& service, const std::string& id,
                                           std::uint64_t generation) {
  DROVER_RETURN_IF_ERROR(ValidateKey(service, id));
  std::lock_guard lock(mu_);
  auto svc = services_.find(service);
  Entry* entry = nullptr;
  if (svc != services_.end()) {
    if (auto it = svc->second.instances.find(id); it != svc->second.instances.end()) {
      entry = &it->second;
    }
  }
  if (entry == nullptr) {
    auto tomb = tombstones_.find(Key{service, id});
    // Deregistering what is already gone is a success: retries after a lost reply are safe.
    if (tomb != tombstones_.end() && generation <= tomb->second.generation) return revision_;
    return NotFoundError(Path(service, id) + " is not registered");
  }
  const Instance cur = entry->instance;
  if (generation < cur.spec.generation) {
    return Fenced(service, id, generation, cur.spec.generation);
  }
  Tombstone tomb;
  tomb.service = service;
  tomb.id = id;
  tomb.generation = std::max(generation, cur.spec.generation);
  tomb.expires_at = clock_.SystemNow() + Ttl(cur.spec);
  DROVER_ASSIGN_OR_RETURN(const std::uint64_t rev,
                          store_->Commit({DeleteInstance(cur), PutTombstone(tomb)}));
  revision_ = rev;
  tomb.revision = rev;
  tombstones_[Key{service, id}] = tomb;
  svc->second.instances.erase(id);
  if (svc->second.instances.empty() && !svc->second.degraded) services_.erase(svc);
  const RemovalReason reason = cur.spec.state == InstanceState::kDraining
                                   ? RemovalReason::kDrain
                                   : RemovalReason::kDeregister;
  Publish({DeleteEvent(cur, rev, reason)});
  return rev;
}

// ---------------------------------------------------------------------------------------------
// Reads

Result<ListResult> Registry::List(const std::string& service) const {
  DROVER_RETURN_IF_ERROR(ValidateName("service", service, options_.limits));
  std::lock_guard lock(mu_);
  ListResult result;
  result.revision = revision_;
  if (auto svc = services_.find(service); svc != services_.end()) {
    result.degraded = svc->second.degraded;
    for (const auto& [id, entry] : svc->second.instances)
      result.instances.push_back(entry.instance);
  }
  return result;
}

std::vector<ServiceSummary> Registry::Services() const {
  std::lock_guard lock(mu_);
  std::vector<ServiceSummary> out;
  for (const auto& [name, svc] : services_) {
    if (svc.instances.empty() && !svc.degraded) continue;
    ServiceSummary s;
    s.name = name;
    s.instances = svc.instances.size();
    s.degraded = svc.degraded;
    for (const auto& [id, entry] : svc.instances) {
      s.ready += entry.instance.spec.state == InstanceState::kReady;
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::uint64_t Registry::revision() const {
  std::lock_guard lock(mu_);
  return revision_;
}

// ---------------------------------------------------------------------------------------------
// Watch

bool Registry::Degraded(const std::string& service) const {
  if (!service.empty()) {
    auto svc = services_.find(service);
    return svc != services_.end() && svc->second.degraded;
  }
  return std::any_of(services_.begin(), services_.end(),
                     [](const auto& kv) { return kv.second.degraded; });
}

Event Registry::ResyncEvent(const std::string& service) const {
  Event e;
  e.type = EventType::kResync;
  e.revision = revision_;
  e.degraded = Degraded(service);
  for (const auto& [name, svc] : services_) {
    if (!service.empty() && name != service) continue;
    for (const auto& [id, entry] : svc.instances) e.snapshot.push_back(entry.instance);
  }
  return e;
}

void Registry::Enqueue(Watcher& watcher, EventPtr event, MonoTime now) {
  {
    std::lock_guard lock(watcher.mu_);
    if (watcher.cancelled_) return;
    // A change already contained in a RESYNC queued for this watcher (the rest of a revision
    // whose first events overflowed the queue) is not sent again, nor anything older.
    const bool data_event = event->type == EventType::kPut || event->type == EventType::kDelete;
    if (data_event && event->revision <= watcher.resynced_at_) return;
    if (watcher.queue_.size() >= options_.watcher_queue_limit) {
      // Too far behind to catch up event by event: replace the backlog with the full state,
      // which is what those events would have produced. Never a gap.
      watcher.queue_.clear();
      watcher.queue_.push_back(std::make_shared<const Event>(ResyncEvent(watcher.service_)));
      watcher.resynced_at_ = revision_;
    } else {
      if (event->type == EventType::kResync) watcher.resynced_at_ = event->revision;
      watcher.queue_.push_back(std::move(event));
    }
    // Called under the watcher's lock, so that once Cancel() returns it is never called again.
    if (watcher.listener_) watcher.listener_();
  }
  watcher.last_sent_ = now;
  watcher.cv_.notify_all();
}

void Registry::Publish(std::vector<Event> events) {
  const MonoTime now = clock_.Now();
  std::vector<EventPtr> shared;
  shared.reserve(events.size());
  for (Event& e : events) {
    shared.push_back(std::make_shared<const Event>(std::move(e)));
    history_.push_back(shared.back());
    while (history_.size() > options_.history) {
      history_floor_ = std::max(history_floor_, history_.front()->revision);
      history_.pop_front();
    }
  }
  std::erase_if(watchers_, [](const std::weak_ptr<Watcher>& w) { return w.expired(); });
  for (const auto& weak : watchers_) {
    std::shared_ptr<Watcher> watcher = weak.lock();
    if (!watcher) continue;
    for (const EventPtr& e : shared) {
      if (watcher->service_.empty() || watcher->service_ == e->instance.service) {
        Enqueue(*watcher, e, now);
      }
    }
  }
}

Result<std::shared_ptr<Watcher>> Registry::Watch(std::uint64_t from_revision,
                                                 const std::string& service) {
  if (!service.empty()) {
    DROVER_RETURN_IF_ERROR(ValidateName("service", service, options_.limits));
  }
  std::lock_guard lock(mu_);
  if (from_revision > revision_) {
    return Status(StatusCode::kOutOfRange, "watch from revision " + std::to_string(from_revision) +
                                               " but the registry is at " +
                                               std::to_string(revision_));
  }
  std::shared_ptr<Watcher> watcher(new Watcher(service));
  const MonoTime now = clock_.Now();
  std::size_t replay = 0;
  for (const EventPtr& e : history_) {
    replay += e->revision > from_revision && (service.empty() || e->instance.service == service);
  }
  // A replay longer than a watcher's queue would overflow into a RESYNC anyway: start with one.
  if (from_revision == 0 || from_revision < history_floor_ ||
      replay >= options_.watcher_queue_limit) {
    Enqueue(*watcher, std::make_shared<const Event>(ResyncEvent(service)), now);
  } else {
    for (const EventPtr& e : history_) {
      if (e->revision > from_revision && (service.empty() || e->instance.service == service)) {
        Enqueue(*watcher, e, now);
      }
    }
    watcher->last_sent_ = now;
  }
  watchers_.push_back(watcher);
  return watcher;
}

// ---------------------------------------------------------------------------------------------
// Time-driven work

Status Registry::Tick() {
  std::lock_guard lock(mu_);
  const MonoTime now = clock_.Now();
  Status first = ExpireLeases(now);
  Status pruned = PruneTombstones();
  if (first.ok()) first = pruned;
  SendProgress(now);
  return first;
}

Status Registry::ExpireLeases(MonoTime now) {
  Status first;
  const SystemTime system_now = clock_.SystemNow();
  std::vector<std::pair<std::string, bool>> degraded_before;
  for (const auto& [name, svc] : services_) degraded_before.emplace_back(name, svc.degraded);
  for (auto& [name, svc] : services_) {
    while (!svc.recent_expiries.empty() &&
           svc.recent_expiries.front() + options_.self_preservation_window <= now) {
      svc.recent_expiries.pop_front();
    }
    std::vector<std::string> lapsed;
    for (const auto& [id, entry] : svc.instances) {
      if (entry.lease_deadline <= now) lapsed.push_back(id);
    }
    if (lapsed.empty()) {
      if (svc.degraded) {
        spdlog::info("registry: service {} left self-preservation: leases are being renewed", name);
        svc.degraded = false;
      }
      continue;
    }
    // Measured against the service as it was at the start of the window.
    const std::size_t n = svc.instances.size() + svc.recent_expiries.size();
    const double would_expire = static_cast<double>(svc.recent_expiries.size() + lapsed.size());
    if (n >= options_.self_preservation_min_instances &&
        would_expire > options_.self_preservation_fraction * static_cast<double>(n)) {
      if (!svc.degraded) {
        spdlog::warn(
            "registry: service {} entered self-preservation: {} of {} instances would expire "
            "within {} s; expiry is frozen and results are flagged degraded until they heartbeat "
            "again (deregister dead instances by hand if they really are gone)",
            name, lapsed.size() + svc.recent_expiries.size(), n,
            std::chrono::duration_cast<std::chrono::seconds>(options_.self_preservation_window)
                .count());
      }
      svc.degraded = true;
      continue;
    }
    svc.degraded = false;

    std::vector<Write> writes;
    std::vector<Tombstone> tombs;
    for (const std::string& id : lapsed) {
      const Instance& in = svc.instances.at(id).instance;
      Tombstone t;
      t.service = name;
      t.id = id;
      t.generation = in.spec.generation;
      t.expires_at = system_now + Ttl(in.spec);
      writes.push_back(DeleteInstance(in));
      writes.push_back(PutTombstone(t));
      tombs.push_back(std::move(t));
    }
    auto rev = store_->Commit(writes);
    if (!rev.ok()) {
      // Leases stay lapsed; the next tick retries.
      spdlog::error("registry: expiring {} instances of {} failed: {}", lapsed.size(), name,
                    rev.status().ToString());
      if (first.ok()) first = rev.status();
      continue;
    }
    revision_ = *rev;
    std::vector<Event> events;
    for (std::size_t i = 0; i < lapsed.size(); ++i) {
      auto it = svc.instances.find(lapsed[i]);
      events.push_back(DeleteEvent(it->second.instance, *rev, RemovalReason::kTtl));
      svc.instances.erase(it);
      tombs[i].revision = *rev;
      tombstones_[Key{name, lapsed[i]}] = tombs[i];
      svc.recent_expiries.push_back(now);
    }
    spdlog::warn("registry: {} instance(s) of {} expired (no heartbeat within their TTL)",
                 lapsed.size(), name);
    Publish(std::move(events));
  }
  // Watchers learn of a change in self-preservation at once, not at their next idle PROGRESS.
  for (const auto& [name, was] : degraded_before) {
    auto svc = services_.find(name);
    if (svc != services_.end() && svc->second.degraded != was) AnnounceDegraded(name, now);
  }
  // A service with no instances left is forgotten, so the map does not grow with every name ever
  // registered.
  std::erase_if(services_,
                [](const auto& kv) { return kv.second.instances.empty() && !kv.second.degraded; });
  return first;
}

void Registry::AnnounceDegraded(const std::string& service, MonoTime now) {
  for (const auto& weak : watchers_) {
    std::shared_ptr<Watcher> watcher = weak.lock();
    if (!watcher || !(watcher->service_.empty() || watcher->service_ == service)) continue;
    Event e;
    e.type = EventType::kProgress;
    e.revision = revision_;
    e.degraded = Degraded(watcher->service_);
    Enqueue(*watcher, std::make_shared<const Event>(std::move(e)), now);
  }
}

Status Registry::PruneTombstones() {
  const SystemTime now = clock_.SystemNow();
  std::vector<Tombstone> expired;
  for (const auto& [key, t] : tombstones_) {
    if (t.expires_at <= now) expired.push_back(t);
  }
  if (expired.empty()) return Status::Ok();
  DROVER_RETURN_IF_ERROR(store_->PruneTombstones(expired));
  for (const Tombstone& t : expired) tombstones_.erase(Key{t.service, t.id});
  return Status::Ok();
}

void Registry::SendProgress(MonoTime now) {
  std::erase_if(watchers_, [](const std::weak_ptr<Watcher>& w) { return w.expired(); });
  for (const auto& weak : watchers_) {
    std::shared_ptr<Watcher> watcher = weak.lock();
    if (!watcher || now - watcher->last_sent_ < options_.progress_interval) continue;
    Event e;
    e.type = EventType::kProgress;
    e.revision = revision_;
    e.degraded = Degraded(watcher->service_);
    Enqueue(*watcher, std::make_shared<const Event>(std::move(e)), now);
  }
}

}  // namespace drover::registry
