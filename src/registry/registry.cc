#include "registry/registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <nlohmann/json.hpp>

#include "common/allocator.h"
#include "common/fencing.h"
#include "common/thread_name.h"

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

// What an event holds in memory, roughly: the object and its instance's strings.
std::size_t EventBytes(const Event& e) {
  const Instance& in = e.instance;
  std::size_t bytes = sizeof(Event) + in.service.size() + in.id.size() + in.spec.address.size() +
                      in.spec.zone.size() + in.spec.version.size();
  for (const auto& [key, value] : in.spec.labels) bytes += 64 + key.size() + value.size();
  return bytes;
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

Result<std::vector<Event>> Watcher::Next(std::chrono::milliseconds timeout, std::stop_token stop) {
  std::vector<EventPtr> shared;
  {
    MutexLock lock(mu_);
    if (!cancelled_ && queue_.empty() && timeout > std::chrono::milliseconds(0)) {
      // Only a consumer that waits touches the condition variable (and is counted, so that a
      // producer notifies only when someone waits): an asynchronous server asking "anything
      // now?" (TakeQueued) after every write costs one uncontended lock.
      ++waiting_;
      if (!cv_) cv_ = std::make_unique<CondVar>();
      cv_->WaitUntil(mu_, stop, std::chrono::steady_clock::now() + timeout,
                     [&]() DROVER_REQUIRES(mu_) { return cancelled_ || !queue_.empty(); });
      --waiting_;
    }
    if (cancelled_ || stop.stop_requested()) return CancelledError("watch cancelled");
    shared.swap(queue_);
  }
  std::vector<Event> events;
  events.reserve(shared.size());
  for (const EventPtr& e : shared) events.push_back(*e);
  return events;
}

Status Watcher::TakeQueued(std::vector<EventPtr>& events) {
  events.clear();
  // The storage handed back is kept by the watcher until the next events: not a burst's worth.
  if (events.capacity() > 64) events = std::vector<EventPtr>();
  MutexLock lock(mu_);
  if (cancelled_) return CancelledError("watch cancelled");
  events.swap(queue_);
  return Status::Ok();
}

void Watcher::Cancel() {
  CondVar* waiters = nullptr;
  {
    MutexLock lock(mu_);
    cancelled_ = true;
    queue_.clear();
    // Wake an asynchronous consumer so that it notices the cancellation.
    if (listener_) listener_();
    listener_ = nullptr;
    waiters = cv_.get();  // (set once, never reset: valid after the lock)
  }
  if (waiters != nullptr) waiters->NotifyAll();
}

void Watcher::SetListener(std::function<void()> listener) {
  std::function<void()> call_now;
  {
    MutexLock lock(mu_);
    if (cancelled_) return;
    listener_ = std::move(listener);
    // Events queued before the listener was set would otherwise wait for the next one.
    if (!queue_.empty()) call_now = listener_;
  }
  if (call_now) call_now();
}

// ---------------------------------------------------------------------------------------------
// Registry: opening

namespace {

// How long a write waits for its own change to come back through a shared store's feed.
constexpr Duration kFeedWait = std::chrono::seconds(10);
// A write that keeps losing compare-and-set races to other registry processes gives up.
constexpr int kMaxAttempts = 8;
// How long a watch from a revision this registry has not applied yet waits for its feed.
constexpr Duration kWatchCatchUp = std::chrono::seconds(2);

}  // namespace

void Registry::Entry::Renew(MonoTime now) {
  lease_deadline = std::max(lease_deadline, now + Ttl(instance.spec));
}

void Registry::ServiceState::SetLease(Entry& entry, MonoTime deadline) {
  entry.lease_deadline = deadline;
  earliest_deadline = std::min(earliest_deadline, deadline);
}

void Registry::ServiceState::Count(const Instance& in) {
  if (in.spec.state != InstanceState::kReady) return;
  ++ready;
  ++ready_versions[in.spec.version];
}

void Registry::ServiceState::Uncount(const Instance& in) {
  if (in.spec.state != InstanceState::kReady) return;
  --ready;
  auto it = ready_versions.find(in.spec.version);
  if (it != ready_versions.end() && --it->second == 0) ready_versions.erase(it);
}

Result<std::unique_ptr<Registry>> Registry::Open(std::unique_ptr<Store> store, Clock& clock,
                                                 RegistryOptions options) {
  DROVER_ASSIGN_OR_RETURN(StoreState state, store->Load());
  std::unique_ptr<Registry> registry(new Registry(std::move(store), clock, std::move(options)));
  const MonoTime now = clock.Now();
  const std::uint64_t revision = state.revision;
  {
    MutexLock lock(registry->mu_);
    registry->revision_ = revision;
    // Events from before this process are not retained: a watcher resuming from an older
    // revision gets a RESYNC.
    registry->history_floor_ = revision;
    for (Instance& in : state.instances) {
      const Duration ttl = Ttl(in.spec);
      ServiceState& svc = registry->services_[in.service];
      auto& entry = svc.instances[in.id];
      entry.instance = std::move(in);
      svc.Count(entry.instance);
      // A fresh lease for everyone: while the registry was down nobody could heartbeat.
      svc.SetLease(entry, now + ttl);
    }
    for (Tombstone& t : state.tombstones) registry->KeepTombstoneLocked(std::move(t));
    // Until this process expires leases itself, self-preservation is what the expirer says.
    for (const std::string& name : state.degraded) registry->services_[name].degraded = true;
    spdlog::info("registry: opened at revision {} with {} services, {} tombstones", revision,
                 registry->services_.size(), registry->tombstones_.size());
  }
  // What the load read (every instance and tombstone as the store gave them, moved from now) is
  // freed here; its pages go back at once rather than stay resident beside the view.
  state = StoreState{};
  ReleaseFreeMemory();
  if (registry->shared_) {
    DROVER_RETURN_IF_ERROR(registry->store_->Follow(revision, registry.get()));
  }
  registry->deployer_ = std::thread([raw = registry.get()] {
    NameThisThread("reg-deploys");
    raw->DeployLoop();
  });
  if (!registry->shared_) {
    registry->answerer_ = std::thread([raw = registry.get()] {
      NameThisThread("reg-answer");
      raw->AnswerLoop();
    });
  }
  const int writers = registry->shared_ ? kSharedWriters : 1;
  for (int i = 0; i < writers; ++i) {
    registry->writers_.emplace_back([raw = registry.get()] {
      NameThisThread("reg-writer");
      raw->WriterLoop();
    });
  }
  return registry;
}

Registry::~Registry() {
  // The deploy calls queued are made and answered; the writers answer what is queued and end;
  // then the store's threads, which call into this object, stop before anything goes.
  if (deployer_.joinable()) {
    {
      MutexLock lock(deploy_mu_);
      deploys_end_ = true;
    }
    deploy_cv_.NotifyAll();
    deployer_.join();
  }
  {
    MutexLock lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.NotifyAll();
  for (std::thread& writer : writers_) writer.join();
  // Every write has its answer queued: the answer thread runs them and ends.
  if (answerer_.joinable()) {
    {
      MutexLock lock(answer_mu_);
      answers_end_ = true;
    }
    answer_cv_.NotifyAll();
    answerer_.join();
  }
  store_.reset();
}

// ---------------------------------------------------------------------------------------------
// Writes

Status Registry::ValidateKey(const std::string& service, const std::string& id) const {
  DROVER_RETURN_IF_ERROR(ValidateName("service", service, options_.limits));
  return ValidateName("instance id", id, options_.limits);
}

Result<std::optional<StoredDeploy>> Registry::GetDeploy(const std::string& id) {
  DROVER_RETURN_IF_ERROR(ValidateName("deploy id", id, options_.limits));
  MutexLock lock(write_mu_);  // a private store is called by one thread at a time
  return store_->GetDeploy(id);
}

Result<std::vector<StoredDeploy>> Registry::ListDeploys(const std::string& service,
                                                        std::size_t limit) {
  if (!service.empty()) DROVER_RETURN_IF_ERROR(ValidateName("service", service, options_.limits));
  MutexLock lock(write_mu_);
  return store_->ListDeploys(service, limit);
}

Result<std::uint64_t> Registry::PutDeploy(StoredDeploy deploy, std::uint64_t expect_version) {
  DROVER_RETURN_IF_ERROR(ValidateName("deploy id", deploy.id, options_.limits));
  DROVER_RETURN_IF_ERROR(ValidateName("service", deploy.service, options_.limits));
  const auto record = nlohmann::json::parse(deploy.record, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || record.value("service", "") != deploy.service) {
    return InvalidArgumentError("a deploy record is a JSON object whose \"service\" is " +
                                deploy.service);
  }
  if (expect_version == 0) deploy.created_ms = ToUnixMillis(clock_.SystemNow());
  MutexLock lock(write_mu_);
  return store_->PutDeploy(deploy, expect_version);
}

void Registry::GetDeployAsync(std::string id, Then<std::optional<StoredDeploy>> done) {
  Defer([this, id = std::move(id), done = std::move(done)] { done(GetDeploy(id)); });
}

void Registry::ListDeploysAsync(std::string service, std::size_t limit,
                                Then<std::vector<StoredDeploy>> done) {
  Defer([this, service = std::move(service), limit, done = std::move(done)] {
    done(ListDeploys(service, limit));
  });
}

void Registry::PutDeployAsync(StoredDeploy deploy, std::uint64_t expect_version,
                              Then<std::uint64_t> done) {
  Defer([this, deploy = std::move(deploy), expect_version, done = std::move(done)]() mutable {
    done(PutDeploy(std::move(deploy), expect_version));
  });
}

void Registry::Defer(std::function<void()> call) {
  {
    MutexLock lock(deploy_mu_);
    deploy_queue_.push_back(std::move(call));
  }
  deploy_cv_.NotifyOne();
}

void Registry::DeployLoop() {
  MutexLock lock(deploy_mu_);
  while (true) {
    deploy_cv_.Wait(deploy_mu_, [&]() DROVER_REQUIRES(deploy_mu_) {
      return deploys_end_ || !deploy_queue_.empty();
    });
    if (deploy_queue_.empty()) return;  // the registry is going, and every call was made
    std::function<void()> call = std::move(deploy_queue_.front());
    deploy_queue_.pop_front();
    lock.Unlock();
    call();
    call = nullptr;  // what it holds (a reply, a record) goes outside the lock
    lock.Lock();
  }
}

Result<Registry::Entry*> Registry::FindForWrite(const std::string& service, const std::string& id,
                                                std::uint64_t generation) {
  auto svc = services_.find(service);
  if (svc != services_.end()) {
    auto it = svc->second.instances.find(id);
    if (it != svc->second.instances.end()) {
      const std::uint64_t current = it->second.instance.spec.generation;
      if (generation < current) return FencedError(service, id, generation, current, "registered");
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
    return FencedError(service, id, generation, tomb->second.generation, "removed");
  }
  return NotFoundError(Path(service, id) + " is not registered");
}

void Registry::Submit(Key key, Planner plan, Done done) {
  {
    MutexLock lock(queue_mu_);
    if (stopping_) {
      lock.Unlock();
      done(UnavailableError("the registry is stopping"));
      return;
    }
    queue_.push_back(PendingWrite{std::move(key), std::move(plan), std::move(done)});
  }
  queue_cv_.NotifyOne();
}

Result<std::uint64_t> Registry::Wait(const std::function<void(Done)>& start) {
  std::promise<Result<std::uint64_t>> answer;
  auto future = answer.get_future();
  start([&answer](Result<std::uint64_t> r) { answer.set_value(std::move(r)); });
  return future.get();
}

void Registry::WriterLoop() {
  MutexLock lock(queue_mu_);
  while (true) {
    queue_cv_.Wait(queue_mu_,
                   [&]() DROVER_REQUIRES(queue_mu_) { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every queued write answered
    // A group of what is queued.
    std::vector<PendingWrite> batch;
    const std::size_t most = shared_ ? kMaxSharedBatch : kMaxBatch;
    while (!queue_.empty() && batch.size() < most) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    lock.Unlock();
    Answers answers = shared_ ? CommitShared(batch) : CommitBatch(batch);
    AnswerGroup group;
    group.reserve(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (answers[i]) group.emplace_back(std::move(batch[i].done), std::move(*answers[i]));
    }
    if (!group.empty()) Answer(std::move(group));
    lock.Lock();
    // Writes to an instance already written in this group go first in the next one, in order.
    for (std::size_t i = batch.size(); i-- > 0;) {
      if (!answers[i]) queue_.push_front(std::move(batch[i]));
    }
  }
}

void Registry::Answer(AnswerGroup group) {
  if (shared_) {
    // Each writer answers its own group: the Txn's round trip is what a shared store's writes
    // wait on, and a hand-off to another thread only added its wake-up to every write's.
    for (auto& [done, answer] : group) done(std::move(answer));
    return;
  }
  bool was_empty = false;
  {
    MutexLock lock(answer_mu_);
    was_empty = answer_queue_.empty();
    answer_queue_.push_back(std::move(group));
  }
  // A non-empty queue has the answer thread awake already (it takes all there is each time).
  if (was_empty) answer_cv_.NotifyOne();
}

void Registry::AnswerLoop() {
  MutexLock lock(answer_mu_);
  while (true) {
    answer_cv_.Wait(answer_mu_, [&]() DROVER_REQUIRES(answer_mu_) {
      return answers_end_ || !answer_queue_.empty();
    });
    if (answer_queue_.empty()) return;  // the writers have ended, and every answer ran
    std::deque<AnswerGroup> groups;
    groups.swap(answer_queue_);
    lock.Unlock();
    for (AnswerGroup& group : groups) {
      for (auto& [done, answer] : group) done(std::move(answer));
    }
    lock.Lock();
  }
}

void Registry::CountCommit(std::uint64_t writes) {
  MutexLock lock(queue_mu_);
  ++counters_.commits;
  counters_.writes += writes;
  counters_.largest = std::max(counters_.largest, writes);
}

Registry::PlannedGroup Registry::PlanGroup(const std::vector<PendingWrite>& batch,
                                           Answers& answers) {
  PlannedGroup group;
  MutexLock lock(mu_);
  const MonoTime now = clock_.Now();
  const SystemTime system_now = clock_.SystemNow();
  std::set<Key> written;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (answers[i]) continue;  // answered already
    // A second write to one instance would be planned against a view without the first: it
    // waits for the next group, which plans against the first one committed.
    if (written.contains(batch[i].key)) continue;
    Result<Plan> plan = batch[i].plan(now, system_now);
    if (!plan.ok()) {
      answers[i] = plan.status();
      continue;
    }
    if (plan->writes.empty()) {
      answers[i] = revision_;
      continue;
    }
    written.insert(batch[i].key);
    group.sets.push_back(std::move(plan->writes));
    group.owners.push_back(i);
  }
  return group;
}

Registry::Answers Registry::CommitBatch(const std::vector<PendingWrite>& batch) {
  Answers answers(batch.size());
  MutexLock write_lock(write_mu_);
  auto [sets, owners] = PlanGroup(batch, answers);
  if (sets.empty()) return answers;
  auto committed = store_->CommitBatch(sets);
  MutexLock lock(mu_);
  if (!committed.ok()) {
    for (std::size_t i : owners) answers[i] = committed.status();
    return answers;
  }
  const MonoTime now = clock_.Now();
  std::vector<Event> events;
  events.reserve(sets.size());  // an event per write, mostly: no regrowth moving them
  std::uint64_t written = 0;
  for (std::size_t j = 0; j < sets.size(); ++j) {
    Result<std::uint64_t>& rev = (*committed)[j];
    if (rev.ok()) {
      ApplyLocked(Change{*rev, std::move(sets[j])}, now, events);
      ++written;
    }
    answers[owners[j]] = std::move(rev);
  }
  if (!events.empty()) Publish(std::move(events));
  if (written > 0) CountCommit(written);
  return answers;
}

CommitCounters Registry::commit_counters() const {
  MutexLock lock(queue_mu_);
  CommitCounters counters = counters_;
  counters.waiting = queue_.size();
  return counters;
}

Registry::Answers Registry::CommitShared(std::vector<PendingWrite>& batch) {
  Answers answers(batch.size());
  // A write that lost a compare is planned again only once this process has seen the change
  // that won (done here, so that the group it lost in was answered without waiting for it).
  if (std::any_of(batch.begin(), batch.end(),
                  [](const PendingWrite& w) { return w.attempts > 0; })) {
    Result<std::uint64_t> head = store_->Head();
    const Status caught_up = head.ok() ? store_->WaitDelivered(*head, kFeedWait) : head.status();
    if (!caught_up.ok()) {
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (batch[i].attempts > 0) answers[i] = caught_up;
      }
    }
  }
  auto [sets, owners] = PlanGroup(batch, answers);
  if (sets.empty()) return answers;
  auto committed = store_->CommitBatch(sets);
  if (!committed.ok()) {
    for (std::size_t i : owners) answers[i] = committed.status();
    return answers;
  }
  std::uint64_t newest = 0;
  std::vector<std::pair<std::uint64_t, std::vector<Write>>> own;
  for (std::size_t j = 0; j < sets.size(); ++j) {
    Result<std::uint64_t>& rev = (*committed)[j];
    PendingWrite& w = batch[owners[j]];
    if (rev.ok()) {
      newest = std::max(newest, *rev);
      own.emplace_back(*rev, std::move(sets[j]));
      answers[owners[j]] = std::move(rev);
    } else if (rev.status().code() != StatusCode::kAborted || ++w.attempts >= kMaxAttempts) {
      answers[owners[j]] = std::move(rev);
    }
    // Else another write changed a row this plan read (from another registry process, or another
    // group of this one): left unanswered, it is queued again and planned once this process has
    // seen that change (the answer may then be "fenced", or a different write).
  }
  if (own.empty()) return answers;
  CountCommit(own.size());
  // Committed: the answer is yes whatever happens next. The caller must be able to read its own
  // write from this process: applied here, or else waited for on the feed.
  if (!store_->consecutive_revisions() || !ApplyOwnCommits(own)) {
    if (Status s = store_->WaitDelivered(newest, kFeedWait); !s.ok()) {
      spdlog::warn("registry: revision {} committed but not yet seen on the store's feed: {}",
                   newest, s.ToString());
    }
  }
  return answers;
}

bool Registry::ApplyOwnCommits(std::vector<std::pair<std::uint64_t, std::vector<Write>>>& commits) {
  MutexLock lock(mu_);
  const MonoTime now = clock_.Now();
  std::vector<Event> events;
  events.reserve(commits.size());
  bool all = true;
  std::uint64_t applying = 0;  // the revision whose sets this call is applying
  for (auto& [rev, writes] : commits) {
    if (rev != applying) {
      if (rev <= revision_) continue;  // the feed brought it already
      if (rev != revision_ + 1) {      // a change this process has not seen came first
        all = false;
        break;
      }
      applying = rev;
    }
    ApplyLocked(Change{rev, std::move(writes)}, now, events);
  }
  if (!events.empty()) Publish(std::move(events));
  return all;
}

void Registry::ApplyLocked(const Change& change, MonoTime now, std::vector<Event>& events) {
  const std::uint64_t rev = change.revision;
  for (const Write& w : change.writes) {
    switch (w.kind) {
      case Write::Kind::kPutInstance: {
        ServiceState& svc = services_[w.service];
        auto it = svc.instances.find(w.id);
        if (it != svc.instances.end() &&
            it->second.instance.spec.generation != w.instance.spec.generation) {
          // A new incarnation replaces the old one: watchers see the old one leave.
          events.push_back(DeleteEvent(it->second.instance, rev, RemovalReason::kFence));
        }
        auto [at, added] = svc.instances.try_emplace(w.id);
        Entry& entry = at->second;
        if (!added) svc.Uncount(entry.instance);
        entry.instance = w.instance;
        svc.Count(entry.instance);
        entry.instance.service = w.service;
        entry.instance.id = w.id;
        entry.instance.mod_revision = rev;
        if (w.create) entry.instance.create_revision = rev;
        // A committed change is a sign of life: the lease starts (again) now, with the TTL it
        // names (shorter than before, perhaps).
        svc.SetLease(entry, now + Ttl(entry.instance.spec));
        events.push_back(PutEvent(entry.instance));
        break;
      }
      case Write::Kind::kDeleteInstance: {
        auto svc = services_.find(w.service);
        if (svc == services_.end()) break;
        auto it = svc->second.instances.find(w.id);
        if (it == svc->second.instances.end()) break;
        events.push_back(DeleteEvent(it->second.instance, rev, w.reason));
        svc->second.Uncount(it->second.instance);
        svc->second.instances.erase(it);
        // A service with no instances left is forgotten, so the map does not grow with every
        // name ever registered.
        if (svc->second.instances.empty() && !svc->second.degraded) services_.erase(svc);
        break;
      }
      case Write::Kind::kPutTombstone: {
        Tombstone t = w.tombstone;
        t.service = w.service;
        t.id = w.id;
        t.revision = rev;
        KeepTombstoneLocked(std::move(t));
        break;
      }
      case Write::Kind::kDeleteTombstone:
        tombstones_.erase(Key{w.service, w.id});
        break;
    }
  }
  revision_ = std::max(revision_, rev);
}

void Registry::KeepTombstoneLocked(Tombstone t) {
  tombstones_due_ = std::min(tombstones_due_, t.expires_at);
  Key key{t.service, t.id};
  tombstones_[std::move(key)] = std::move(t);
}

void Registry::ApplyAndPublishLocked(const Change& change, MonoTime now) {
  std::vector<Event> events;
  ApplyLocked(change, now, events);
  if (!events.empty()) Publish(std::move(events));
}

void Registry::OnChange(const Change& change) {
  MutexLock lock(mu_);
  if (change.revision <= revision_) return;  // already in the view (a resync covered it)
  ApplyAndPublishLocked(change, clock_.Now());
}

bool Registry::Holds(std::uint64_t revision) {
  MutexLock lock(mu_);
  return revision <= revision_;
}

void Registry::OnRenewals(const std::vector<LeaseRenewal>& renewals) {
  MutexLock lock(mu_);
  const MonoTime now = clock_.Now();
  for (const LeaseRenewal& r : renewals) {
    auto svc = services_.find(r.service);
    if (svc == services_.end()) continue;
    auto it = svc->second.instances.find(r.id);
    if (it == svc->second.instances.end()) continue;
    if (it->second.instance.spec.generation != r.generation) continue;
    it->second.Renew(now);
  }
}

void Registry::OnFeedRestored() {
  // What a restart does, for the same reason: while the feed was down, heartbeats accepted by
  // other processes could not reach this one. Every lease gets at least a fresh TTL.
  MutexLock lock(mu_);
  const MonoTime now = clock_.Now();
  for (auto& [name, svc] : services_) {
    for (auto& [id, entry] : svc.instances) entry.Renew(now);
  }
}

void Registry::OnReset(StoreState state) {
  MutexLock lock(mu_);
  const MonoTime now = clock_.Now();
  spdlog::warn(
      "registry: the store's feed lost its place (compacted past revision {}); reloaded at "
      "revision {}, every watcher gets a RESYNC",
      revision_, state.revision);
  std::map<std::string, ServiceState> services;
  for (Instance& in : state.instances) {
    ServiceState& svc = services[in.service];
    Entry& entry = svc.instances[in.id];
    // Leases start now (renewals may have been lost while the feed was away), or later if this
    // process knew a later deadline.
    MonoTime deadline = now + Ttl(in.spec);
    if (auto old = services_.find(in.service); old != services_.end()) {
      svc.recent_expiries = old->second.recent_expiries;
      svc.degraded = old->second.degraded;
      auto known = old->second.instances.find(in.id);
      if (known != old->second.instances.end() &&
          known->second.instance.spec.generation == in.spec.generation) {
        deadline = std::max(deadline, known->second.lease_deadline);
      }
    }
    svc.SetLease(entry, deadline);
    entry.instance = std::move(in);
    svc.Count(entry.instance);
  }
  services_ = std::move(services);
  if (!expirer_.load()) {
    for (auto& [name, svc] : services_) svc.degraded = false;
    for (const std::string& name : state.degraded) services_[name].degraded = true;
  }
  tombstones_.clear();
  tombstones_due_ = SystemTime::max();
  for (Tombstone& t : state.tombstones) KeepTombstoneLocked(std::move(t));
  revision_ = std::max(revision_, state.revision);
  // The events in between are unknown: nobody may resume inside the gap.
  history_.clear();
  history_bytes_ = 0;
  history_floor_ = revision_;
  std::erase_if(watchers_, [](const std::weak_ptr<Watcher>& w) { return w.expired(); });
  for (const auto& weak : watchers_) {
    if (std::shared_ptr<Watcher> watcher = weak.lock()) {
      Enqueue(*watcher, std::make_shared<const Event>(ResyncEvent(watcher->service_)), now);
    }
  }
}

Result<std::uint64_t> Registry::Register(const std::string& service, const std::string& id,
                                         const InstanceSpec& spec) {
  return Wait([&](Done done) { RegisterAsync(service, id, spec, std::move(done)); });
}

void Registry::RegisterAsync(std::string service, std::string id, InstanceSpec spec, Done done) {
  if (Status s = ValidateKey(service, id); !s.ok()) return done(s);
  if (Status s = ValidateSpec(spec, options_.limits).WithContext(Path(service, id)); !s.ok()) {
    return done(s);
  }
  Key key{service, id};
  Planner planner = [this, service = std::move(service), id = std::move(id),
                     spec = std::move(spec)](MonoTime now, SystemTime system_now)
                        DROVER_REQUIRES(mu_) -> Result<Plan> {
    auto tomb = tombstones_.find(Key{service, id});
    if (tomb != tombstones_.end() && spec.generation <= tomb->second.generation) {
      return FencedError(service, id, spec.generation, tomb->second.generation,
                         "removed; a restarted instance registers with a higher generation");
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
    Plan plan;
    if (existing == nullptr) {
      next.ready_since = ReadySince(nullptr, next.spec.state, system_now);
      plan.writes.push_back(PutInstance(next, /*create=*/true, /*expect=*/0));
      if (tomb != tombstones_.end()) plan.writes.push_back(DeleteTombstone(service, id));
      return plan;
    }
    const Instance& cur = existing->instance;
    if (spec.generation < cur.spec.generation) {
      return FencedError(service, id, spec.generation, cur.spec.generation, "registered");
    }
    if (spec.generation > cur.spec.generation) {
      next.ready_since = ReadySince(nullptr, next.spec.state, system_now);
      plan.writes.push_back(PutInstance(next, /*create=*/true, cur.mod_revision));
      return plan;
    }
    // Re-registration of the same incarnation: an update that cannot undo a drain.
    if (cur.spec.state == InstanceState::kDraining) next.spec.state = InstanceState::kDraining;
    next.create_revision = cur.create_revision;
    next.ready_since = ReadySince(&cur, next.spec.state, system_now);
    if (next.spec == cur.spec) {
      existing->Renew(now);
      if (shared_) store_->ShareRenewals({LeaseRenewal{service, id, spec.generation}});
      return plan;  // nothing to write
    }
    plan.writes.push_back(PutInstance(next, /*create=*/false, cur.mod_revision));
    return plan;
  };
  Submit(std::move(key), std::move(planner), std::move(done));
}

Result<std::uint64_t> Registry::Heartbeat(const std::string& service, const std::string& id,
                                          std::uint64_t generation) {
  MutexLock lock(mu_);
  DROVER_RETURN_IF_ERROR(RenewLocked(service, id, generation, clock_.Now()));
  if (shared_) store_->ShareRenewals({LeaseRenewal{service, id, generation}});
  return revision_;
}

std::uint64_t Registry::HeartbeatAll(const std::vector<LeaseRenewal>& renewals,
                                     std::vector<Status>& results) {
  results.clear();
  results.reserve(renewals.size());
  std::vector<LeaseRenewal> accepted;
  MutexLock lock(mu_);
  const MonoTime now = clock_.Now();
  for (const LeaseRenewal& r : renewals) {
    results.push_back(RenewLocked(r.service, r.id, r.generation, now));
    if (shared_ && results.back().ok()) accepted.push_back(r);
  }
  if (!accepted.empty()) store_->ShareRenewals(accepted);
  return revision_;
}

Status Registry::RenewLocked(const std::string& service, const std::string& id,
                             std::uint64_t generation, MonoTime now) {
  DROVER_RETURN_IF_ERROR(ValidateKey(service, id));
  DROVER_ASSIGN_OR_RETURN(Entry * entry, FindForWrite(service, id, generation));
  entry->Renew(now);
  return Status::Ok();
}

Result<std::uint64_t> Registry::SetState(const std::string& service, const std::string& id,
                                         std::uint64_t generation,
                                         std::optional<InstanceState> state,
                                         std::optional<bool> accepting) {
  return Wait([&](Done done) {
    SetStateAsync(service, id, generation, state, accepting, std::move(done));
  });
}

void Registry::SetStateAsync(std::string service, std::string id, std::uint64_t generation,
                             std::optional<InstanceState> state, std::optional<bool> accepting,
                             Done done) {
  if (Status s = ValidateKey(service, id); !s.ok()) return done(s);
  Key key{service, id};
  Planner planner = [this, service = std::move(service), id = std::move(id), generation, state,
                     accepting](MonoTime now, SystemTime system_now)
                        DROVER_REQUIRES(mu_) -> Result<Plan> {
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
    next.ready_since = ReadySince(&cur, next.spec.state, system_now);
    Plan plan;
    if (next.spec == cur.spec) {
      // A state change is a sign of life and renews the lease -- once it is accepted (a
      // committed change renews it when applied).
      entry->Renew(now);
      if (shared_) store_->ShareRenewals({LeaseRenewal{service, id, generation}});
      return plan;
    }
    plan.writes.push_back(PutInstance(next, false, cur.mod_revision));
    return plan;
  };
  Submit(std::move(key), std::move(planner), std::move(done));
}

Result<std::uint64_t> Registry::Deregister(const std::string& service, const std::string& id,
                                           std::uint64_t generation) {
  return Wait([&](Done done) { DeregisterAsync(service, id, generation, std::move(done)); });
}

void Registry::DeregisterAsync(std::string service, std::string id, std::uint64_t generation,
                               Done done) {
  if (Status s = ValidateKey(service, id); !s.ok()) return done(s);
  Key key{service, id};
  Planner planner = [this, service = std::move(service), id = std::move(id), generation](
                        MonoTime, SystemTime system_now) DROVER_REQUIRES(mu_) -> Result<Plan> {
    Entry* entry = nullptr;
    if (auto svc = services_.find(service); svc != services_.end()) {
      if (auto it = svc->second.instances.find(id); it != svc->second.instances.end()) {
        entry = &it->second;
      }
    }
    if (entry == nullptr) {
      auto tomb = tombstones_.find(Key{service, id});
      // Deregistering what is already gone is a success: retries after a lost reply are safe.
      if (tomb != tombstones_.end() && generation <= tomb->second.generation) return Plan{};
      return NotFoundError(Path(service, id) + " is not registered");
    }
    const Instance& cur = entry->instance;
    if (generation < cur.spec.generation) {
      return FencedError(service, id, generation, cur.spec.generation, "registered");
    }
    Tombstone tomb;
    tomb.service = service;
    tomb.id = id;
    tomb.generation = std::max(generation, cur.spec.generation);
    tomb.expires_at = system_now + Ttl(cur.spec);
    Write remove = DeleteInstance(cur);
    remove.reason = cur.spec.state == InstanceState::kDraining ? RemovalReason::kDrain
                                                               : RemovalReason::kDeregister;
    Plan plan;
    plan.writes = {std::move(remove), PutTombstone(tomb)};
    return plan;
  };
  Submit(std::move(key), std::move(planner), std::move(done));
}

// ---------------------------------------------------------------------------------------------
// Reads

Result<ListResult> Registry::List(const std::string& service) const {
  ListResult result;
  const auto copy = [&](const Instance& instance, Duration lease_left, std::size_t count) {
    if (result.instances.empty()) {
      result.instances.reserve(count);
      result.lease_remaining.reserve(count);
    }
    result.instances.push_back(instance);
    result.lease_remaining.push_back(lease_left);
  };
  DROVER_ASSIGN_OR_RETURN(const ListHead head, VisitList(service, copy));
  result.revision = head.revision;
  result.degraded = head.degraded;
  return result;
}

Result<ListHead> Registry::VisitList(
    const std::string& service,
    const std::function<void(const Instance&, Duration, std::size_t)>& visit) const {
  DROVER_RETURN_IF_ERROR(ValidateName("service", service, options_.limits));
  MutexLock lock(mu_);
  ListHead head;
  head.revision = revision_;
  if (auto svc = services_.find(service); svc != services_.end()) {
    head.degraded = svc->second.degraded;
    const MonoTime now = clock_.Now();
    const std::size_t count = svc->second.instances.size();
    for (const auto& [id, entry] : svc->second.instances) {
      visit(entry.instance, std::max(Duration::zero(), entry.lease_deadline - now), count);
    }
  }
  return head;
}

std::vector<ServiceSummary> Registry::Services() const {
  MutexLock lock(mu_);
  std::vector<ServiceSummary> out;
  for (const auto& [name, svc] : services_) {
    if (svc.instances.empty() && !svc.degraded) continue;
    ServiceSummary s;
    s.name = name;
    s.instances = svc.instances.size();
    s.degraded = svc.degraded;
    s.ready = svc.ready;
    s.ready_versions = svc.ready_versions;
    out.push_back(std::move(s));
  }
  return out;
}

std::uint64_t Registry::revision() const {
  MutexLock lock(mu_);
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
  CondVar* waiters = nullptr;
  {
    MutexLock lock(watcher.mu_);
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
    watcher.last_sent_ = now;
    if (watcher.waiting_ == 0) return;
    waiters = watcher.cv_.get();  // (a consumer waits: it made the condition variable)
  }
  waiters->NotifyAll();
}

void Registry::Publish(std::vector<Event> events) {
  const MonoTime now = clock_.Now();
  std::vector<EventPtr> shared;
  shared.reserve(events.size());
  for (Event& e : events) {
    shared.push_back(std::make_shared<const Event>(std::move(e)));
    history_.push_back(shared.back());
    history_bytes_ += EventBytes(*shared.back());
    while (history_.size() > options_.history || history_bytes_ > options_.history_bytes) {
      history_floor_ = std::max(history_floor_, history_.front()->revision);
      history_bytes_ -= EventBytes(*history_.front());
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
  if (store_->shared() && from_revision > revision()) {
    // A client failing over from another registry of the cluster may have seen commits this one's
    // feed has not delivered yet: wait for them rather than refuse a revision that exists.
    (void)store_->WaitDelivered(from_revision, kWatchCatchUp);
  }
  MutexLock lock(mu_);
  if (from_revision > revision_) {
    return OutOfRangeError("watch from revision " + std::to_string(from_revision) +
                           " but the registry is at " + std::to_string(revision_));
  }
  const MonoTime now = clock_.Now();
  std::shared_ptr<Watcher> watcher(new Watcher(service, now));
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
  }
  watchers_.push_back(watcher);
  return watcher;
}

// ---------------------------------------------------------------------------------------------
// Time-driven work

Status Registry::Tick() {
  Status first;
  expirer_.store(store_->Expirer());
  if (expirer_.load()) {  // on a shared store, only the elected process expires and prunes
    first = ExpireLeases();
    Status pruned = PruneTombstones();
    if (first.ok()) first = pruned;
    if (shared_) ShareDegraded();
  }
  MutexLock lock(mu_);
  SendProgress(clock_.Now());
  return first;
}

std::vector<Registry::Plan> Registry::PlanExpiry(MonoTime now, SystemTime system_now) {
  std::vector<Plan> plans;
  std::vector<std::pair<std::string, bool>> degraded_before;
  for (const auto& [name, svc] : services_) degraded_before.emplace_back(name, svc.degraded);
  for (auto& [name, svc] : services_) {
    while (!svc.recent_expiries.empty() &&
           svc.recent_expiries.front() + options_.self_preservation_window <= now) {
      svc.recent_expiries.pop_front();
    }
    // Nothing can have lapsed yet. (A degraded service is looked at every tick, to see it leave
    // self-preservation as soon as its instances heartbeat again.)
    if (!svc.degraded && now < svc.earliest_deadline) continue;
    std::vector<const Instance*> lapsed;
    MonoTime earliest = MonoTime::max();
    for (const auto& [id, entry] : svc.instances) {
      if (entry.lease_deadline <= now) lapsed.push_back(&entry.instance);
      earliest = std::min(earliest, entry.lease_deadline);
    }
    // Exact now; lapsed leases that stay (frozen, or their expiry fails) keep it at or before
    // `now`, so the next tick looks again.
    svc.earliest_deadline = earliest;
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
    Plan plan;  // committed by ExpireLeases, fenced on the expirer role
    for (const Instance* in : lapsed) {
      Tombstone t;
      t.service = name;
      t.id = in->id;
      t.generation = in->spec.generation;
      t.expires_at = system_now + Ttl(in->spec);
      Write remove = DeleteInstance(*in);
      remove.reason = RemovalReason::kTtl;
      plan.writes.push_back(std::move(remove));
      plan.writes.push_back(PutTombstone(t));
    }
    plans.push_back(std::move(plan));
  }
  // Watchers learn of a change in self-preservation at once, not at their next idle PROGRESS.
  for (const auto& [name, was] : degraded_before) {
    auto svc = services_.find(name);
    if (svc != services_.end() && svc->second.degraded != was) AnnounceDegraded(name, now);
  }
  std::erase_if(services_,
                [](const auto& kv) { return kv.second.instances.empty() && !kv.second.degraded; });
  return plans;
}

Status Registry::ExpireLeases() {
  MutexLock write_lock(write_mu_);
  std::vector<Plan> plans;
  {
    MutexLock lock(mu_);
    // On a shared store a renewal accepted by another process reaches this one a little later:
    // expiry waits that much longer rather than expire an instance that did heartbeat.
    plans = PlanExpiry(clock_.Now() - store_->RenewalDelay(), clock_.SystemNow());
  }
  Status first;
  for (Plan& plan : plans) {
    const std::string service = plan.writes.front().service;
    const std::size_t count = plan.writes.size() / 2;
    auto rev = store_->CommitAsExpirer(plan.writes);
    if (!rev.ok()) {
      // Leases stay lapsed; the next tick retries (after a lost race, from a fresher view).
      spdlog::error("registry: expiring {} instance(s) of {} failed: {}", count, service,
                    rev.status().ToString());
      if (first.ok()) first = rev.status();
      continue;
    }
    spdlog::warn("registry: {} instance(s) of {} expired (no heartbeat within their TTL)", count,
                 service);
    if (shared_) (void)store_->WaitDelivered(*rev, kFeedWait);
    MutexLock lock(mu_);
    const MonoTime now = clock_.Now();
    if (!shared_) ApplyAndPublishLocked(Change{*rev, std::move(plan.writes)}, now);
    auto svc = services_.find(service);
    if (svc == services_.end()) svc = services_.emplace(service, ServiceState{}).first;
    for (std::size_t i = 0; i < count; ++i) svc->second.recent_expiries.push_back(now);
  }
  return first;
}
std::vector<std::string> Registry::DegradedServices() const {
  std::vector<std::string> out;
  for (const auto& [name, svc] : services_) {
    if (svc.degraded) out.push_back(name);
  }
  return out;
}

void Registry::SetDegradedLocked(const std::vector<std::string>& services, MonoTime now) {
  const std::set<std::string> wanted(services.begin(), services.end());
  for (const std::string& name : wanted) services_.try_emplace(name);
  for (auto& [name, svc] : services_) {
    const bool degraded = wanted.contains(name);
    if (svc.degraded == degraded) continue;
    spdlog::info("registry: service {} {} self-preservation (as the expirer decided)", name,
                 degraded ? "entered" : "left");
    svc.degraded = degraded;
    AnnounceDegraded(name, now);
  }
  std::erase_if(services_,
                [](const auto& kv) { return kv.second.instances.empty() && !kv.second.degraded; });
}

void Registry::ShareDegraded() {
  MutexLock write_lock(write_mu_);
  std::vector<std::string> degraded;
  {
    MutexLock lock(mu_);
    degraded = DegradedServices();
  }
  if (shared_degraded_ && *shared_degraded_ == degraded) return;
  if (Status s = store_->ShareDegraded(degraded); !s.ok()) {
    spdlog::warn("registry: cannot tell the other registries about self-preservation yet: {}",
                 s.ToString());
    return;  // the next tick tries again
  }
  shared_degraded_ = std::move(degraded);
}

void Registry::OnDegraded(const std::vector<std::string>& services) {
  MutexLock lock(mu_);
  // Its own decision, echoed back. (Not store_->Expirer(): the feed delivers until the store is
  // gone, store_ included.)
  if (expirer_.load()) return;
  SetDegradedLocked(services, clock_.Now());
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
  std::vector<Tombstone> expired;
  {
    MutexLock lock(mu_);
    const SystemTime now = clock_.SystemNow();
    if (now < tombstones_due_) return Status::Ok();
    SystemTime earliest = SystemTime::max();
    for (const auto& [key, t] : tombstones_) {
      if (t.expires_at <= now) expired.push_back(t);
      earliest = std::min(earliest, t.expires_at);
    }
    // Exact; the ones due stay until their pruning is applied, so a failed one is tried again.
    tombstones_due_ = earliest;
  }
  if (expired.empty()) return Status::Ok();
  MutexLock write_lock(write_mu_);
  DROVER_RETURN_IF_ERROR(store_->PruneTombstones(expired));
  if (shared_) return Status::Ok();  // the feed reports the deletions
  MutexLock lock(mu_);
  for (const Tombstone& t : expired) tombstones_.erase(Key{t.service, t.id});
  return Status::Ok();
}

void Registry::SendProgress(MonoTime now) {
  std::erase_if(watchers_, [](const std::weak_ptr<Watcher>& w) { return w.expired(); });
  for (const auto& weak : watchers_) {
    std::shared_ptr<Watcher> watcher = weak.lock();
    if (!watcher) continue;
    {
      MutexLock lock(watcher->mu_);
      if (now - watcher->last_sent_ < options_.progress_interval) continue;
    }
    Event e;
    e.type = EventType::kProgress;
    e.revision = revision_;
    e.degraded = Degraded(watcher->service_);
    Enqueue(*watcher, std::make_shared<const Event>(std::move(e)), now);
  }
}

}  // namespace drover::registry
