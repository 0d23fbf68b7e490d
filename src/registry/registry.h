// Registry: the rules of service discovery over a Store (REG-1..REG-5).
//
// - Fencing (REG-2): every write carries the instance's generation; a write older than the newest
//   generation seen -- live or in a tombstone -- is ABORTED ("fenced"). A deregistration or expiry
//   leaves a tombstone for at least one TTL, so a late register or heartbeat cannot resurrect it.
// - State (REG-1): STARTING / READY / DRAINING is sticky intent: heartbeats never change it and a
//   re-register of the same generation cannot undo a drain. `accepting` is separate.
// - Leases (REG-3): a register, heartbeat or state change renews the lease in memory. Tick()
//   expires lapsed leases with reason "ttl", unless more than `self_preservation_fraction` of a
//   service would go within `self_preservation_window`: then expiry freezes for that service and
//   its lists, RESYNC and PROGRESS events say `degraded` until its instances heartbeat again.
//   Open() grants every stored instance a fresh lease of its TTL: a restart never expires
//   instances that could not reach a registry that was down.
// - Revisions and watch (REG-5): every committed change advances one global revision. Watch(from)
//   replays the retained events after `from`, or starts with a RESYNC (full snapshot) when they
//   are gone or `from` is 0; a watcher that falls too far behind gets a RESYNC instead of a gap;
//   Tick() sends PROGRESS to watchers idle for `progress_interval`.
//
// - One view, two ways in: every write is planned against the in-memory view, committed to the
//   Store (compare-and-set on the rows it read), and then applied to the view as a Change, from
//   which the watch events follow. With a private store (SQLite) the registry applies its own
//   commit; with a shared store (etcd) every registry process applies every commit from the
//   store's feed, in revision order, and a write returns once the view holds it
//   (read-your-writes): its writer applies it at once when the view stood at the revision just
//   before it (nothing else can have come between; the feed's copy is then skipped), else it
//   waits for the feed to bring it back. A compare-and-set lost to another process means: catch
//   up with the feed and plan again.
// - Leases across processes (shared store): a heartbeat renews the lease in this process's view
//   and is passed to the others through the store (batched); only the process the store elects
//   as expirer expires leases, and its expiry commits are fenced on that role.
//
// - Writes queue and are committed by the registry's own writer threads; each is answered
//   through a callback (the *Async calls; the others wait for it), run by the registry's answer
//   thread, so that a writer commits the next group while the last one's replies go out. Private
//   store: one writer thread commits in groups -- it takes what is queued, plans each write
//   against the view (one write per instance per group: a second write to the same instance
//   waits for the next group, so every plan reads committed state), commits them in one store
//   transaction and one fsync, each at its own revision, applies them in order and then hands
//   their answers over all at once. A write is acknowledged only after the fsync that holds it.
//   Shared store: kSharedWriters threads each take a group (one write per instance), plan it
//   against the view and commit it in one store call (etcd: one Txn, each write a nested Txn
//   with its own compares), several groups in flight at once, kept apart by their compare
//   conditions; a write answers once the feed has brought its change back, and a write whose
//   compare was lost is queued again and planned after this process has caught up.
// - Deploy records (*DeployAsync) are read and written by a thread of their own, so that a
//   caller on an io thread waits neither for a commit nor for the store's round trip.
//
// Thread-safe: `write_mu_` is held by whoever talks to a private store (the writer from planning
// to applying, expiry, pruning, deploys), `mu_` guards the view and is never held across a
// commit, `queue_mu_` guards the queue of writes, and watchers have their own queue. Time
// comes from the injected Clock, so tests drive hours of leases with a FakeClock. The registry does
// not own the Clock, which must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "drover/clock.h"
#include "drover/mutex.h"
#include "drover/status.h"
#include "registry/model.h"
#include "registry/store.h"

namespace drover::registry {

struct RegistryOptions {
  Limits limits;
  std::size_t history = 10'000;  // events kept for watchers resuming from a revision
  // ... and at most this many bytes of them (an instance's labels can be large): the oldest go
  // first, and a watcher resuming from before them gets a RESYNC.
  std::size_t history_bytes = 64 << 20;
  double self_preservation_fraction = 0.5;
  Duration self_preservation_window = std::chrono::seconds(60);
  std::size_t self_preservation_min_instances = 3;  // smaller services always expire
  Duration progress_interval = std::chrono::seconds(5);
  std::size_t watcher_queue_limit = 10'000;  // beyond this a watcher is resynced, not stalled
};

// What a list holds besides its instances.
struct ListHead {
  std::uint64_t revision = 0;
  bool degraded = false;
};

struct ListResult {
  std::uint64_t revision = 0;
  bool degraded = false;
  std::vector<Instance> instances;
  // Per instance, in the same order: time left on its lease (zero once lapsed). Renewals are in
  // memory only and make no event, so this is how an operator sees heartbeats arrive.
  std::vector<Duration> lease_remaining;
};

// How group commit went: store commits (one transaction and fsync each) and the writes they held.
struct CommitCounters {
  std::uint64_t commits = 0;
  std::uint64_t writes = 0;
  std::uint64_t largest = 0;  // writes in the largest commit
  std::size_t waiting = 0;    // writes queued for the next batch right now
};

struct ServiceSummary {
  std::string name;
  std::size_t instances = 0;
  std::size_t ready = 0;
  // READY instances per version they run ("" for those registered without one).
  std::map<std::string, std::size_t> ready_versions;
  bool degraded = false;
};

class Registry;

// Events are immutable once published and shared by the history and every watcher's queue: a
// write fanned out to a thousand watchers is one allocation, not a thousand copies.
using EventPtr = std::shared_ptr<const Event>;

// One watch stream. Events arrive in revision order; a RESYNC replaces everything before it.
// Next() may be called from one thread at a time; Cancel() from any thread.
class Watcher {
 public:
  // Waits up to `timeout` (real time) for events; returns what is queued (possibly nothing).
  // Returns CANCELLED once cancelled or when `stop` fires.
  Result<std::vector<Event>> Next(std::chrono::milliseconds timeout, std::stop_token stop = {});
  // For an asynchronous consumer (see SetListener): replaces `events` with what is queued now,
  // without waiting, and hands the watcher the old vector's storage for the next events (a
  // consumer that keeps passing the same vector makes delivery allocate nothing; storage grown
  // by a burst is freed instead). CANCELLED once cancelled.
  Status TakeQueued(std::vector<EventPtr>& events);
  void Cancel();
  const std::string& service_filter() const { return service_; }

  // Called after events are queued, on the thread that queued them and while the registry's and
  // this watcher's locks are held: it must be cheap and must not call into the Registry or this
  // Watcher (post to an event loop). Cancel() calls it once more, so a waiting consumer wakes
  // and sees the cancellation, then clears it. Lets an asynchronous server wait for events without
  // a thread per watch.
  void SetListener(std::function<void()> listener);

 private:
  friend class Registry;
  Watcher(std::string service, MonoTime created)
      : service_(std::move(service)), last_sent_(created) {}

  const std::string service_;  // empty: every service
  Mutex mu_;
  // Made by the first consumer that waits in Next(): an asynchronous consumer (a watch stream)
  // never waits on it, and an idle stream then holds none (a condition variable that takes a
  // stop_token allocates besides its own 64 bytes).
  std::unique_ptr<CondVar> cv_ DROVER_GUARDED_BY(mu_);
  // A vector, not a deque: an idle watcher allocates nothing for it, and a consumer takes the
  // whole backlog by swapping it out.
  std::vector<EventPtr> queue_ DROVER_GUARDED_BY(mu_);
  bool cancelled_ DROVER_GUARDED_BY(mu_) = false;
  int waiting_ DROVER_GUARDED_BY(mu_) = 0;  // consumers blocked in Next()
  std::function<void()> listener_ DROVER_GUARDED_BY(mu_);
  // Last event or progress queued.
  MonoTime last_sent_ DROVER_GUARDED_BY(mu_);
  // Revision of the last RESYNC queued.
  std::uint64_t resynced_at_ DROVER_GUARDED_BY(mu_) = 0;
};

class Registry final : private StoreListener {
 public:
  static Result<std::unique_ptr<Registry>> Open(std::unique_ptr<Store> store, Clock& clock,
                                                RegistryOptions options = {});
  // Stops the store (its feed) before anything it calls into goes away.
  ~Registry() override;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Each returns the revision the registry is at after the call.
  Result<std::uint64_t> Register(const std::string& service, const std::string& id,
                                 const InstanceSpec& spec);
  // What a write answers: the revision, or why it was refused.
  using Done = std::function<void(Result<std::uint64_t>)>;
  // The writes without waiting for them: `done` runs once with what Register, SetState or
  // Deregister would have returned, after the commit that holds the write -- on a private store
  // on the registry's answer thread (the answers of one group in order, groups in commit order),
  // on a shared store on the writer thread that committed it (the answers of one group in order;
  // the writers' groups in any order) -- or at once on the calling thread when the write is
  // refused before it queues (bad names or spec). `done` must be quick and must not wait for
  // another write.
  void RegisterAsync(std::string service, std::string id, InstanceSpec spec, Done done);
  void SetStateAsync(std::string service, std::string id, std::uint64_t generation,
                     std::optional<InstanceState> state, std::optional<bool> accepting, Done done);
  void DeregisterAsync(std::string service, std::string id, std::uint64_t generation, Done done);
  Result<std::uint64_t> Heartbeat(const std::string& service, const std::string& id,
                                  std::uint64_t generation);
  // Heartbeats for many instances under one lock acquisition (a process renewing all the
  // instances it hosts). `results` gets one status per renewal, in order, each what Heartbeat()
  // would have returned; the return value is the registry's revision.
  std::uint64_t HeartbeatAll(const std::vector<LeaseRenewal>& renewals,
                             std::vector<Status>& results);
  Result<std::uint64_t> SetState(const std::string& service, const std::string& id,
                                 std::uint64_t generation, std::optional<InstanceState> state,
                                 std::optional<bool> accepting);
  Result<std::uint64_t> Deregister(const std::string& service, const std::string& id,
                                   std::uint64_t generation);

  // NOT_FOUND for a service that has never had an instance is not an error here: an unknown
  // service lists as empty with the current revision (REG-4: errors are statuses, and an empty
  // list is only ever a real empty list).
  Result<ListResult> List(const std::string& service) const;
  // What List returns, each instance handed to `visit` (with its lease's time left, as in
  // ListResult, and how many the list holds, the same in every call) instead of copied out: for
  // an encoder of a large list, whose output is smaller than copies of the instances. `visit`
  // runs under the registry's lock: it must be quick, and must not call the registry.
  Result<ListHead> VisitList(
      const std::string& service,
      const std::function<void(const Instance&, Duration, std::size_t)>& visit) const;
  std::vector<ServiceSummary> Services() const;
  std::uint64_t revision() const;

  // Watches every service (`service` empty) or one, from `from_revision` (0: start with a
  // RESYNC). OUT_OF_RANGE when `from_revision` is ahead of the registry.
  Result<std::shared_ptr<Watcher>> Watch(std::uint64_t from_revision, const std::string& service);

  // Deploys, kept in the store for the deploy controller (store.h, StoredDeploy): not part of the
  // registry's revisions, no watch events. PutDeploy checks the id and service names and that
  // the record is a JSON object naming the same service (INVALID_ARGUMENT), stamps created_ms on
  // the first write, then stores it as Store::PutDeploy says (ABORTED on a version mismatch,
  // FAILED_PRECONDITION when another deploy of the service is running).
  Result<std::optional<StoredDeploy>> GetDeploy(const std::string& id) DROVER_EXCLUDES(write_mu_);
  Result<std::vector<StoredDeploy>> ListDeploys(const std::string& service, std::size_t limit)
      DROVER_EXCLUDES(write_mu_);
  Result<std::uint64_t> PutDeploy(StoredDeploy deploy, std::uint64_t expect_version)
      DROVER_EXCLUDES(write_mu_);
  // The same three without waiting, for a caller that must not block (an io thread): each call is
  // queued to the registry's deploy thread, which makes them one at a time in the order queued
  // and runs `done` there with what the call above returns. That thread is the one that waits --
  // on a private store for the commit in progress, on etcd for the round trip (up to its call
  // timeout). `done` must be quick. Every call queued before the registry is destroyed is made
  // and answered.
  template <typename T>
  using Then = std::function<void(Result<T>)>;
  void GetDeployAsync(std::string id, Then<std::optional<StoredDeploy>> done);
  void ListDeploysAsync(std::string service, std::size_t limit,
                        Then<std::vector<StoredDeploy>> done);
  void PutDeployAsync(StoredDeploy deploy, std::uint64_t expect_version, Then<std::uint64_t> done);

  // Expires lapsed leases (or freezes expiry, see above) and prunes expired tombstones -- on a
  // shared store only in the elected expirer -- and sends PROGRESS to idle watchers. Returns the
  // first store error, if any; the rest still runs.
  Status Tick();

  // Whether this process expires leases (always, with a private store).
  bool expirer() const { return store_->Expirer(); }

  // Writes committed so far and the store commits that held them (private store; a shared
  // store's writes are one commit each).
  CommitCounters commit_counters() const DROVER_EXCLUDES(queue_mu_);

 private:
  struct Entry {
    Instance instance;
    MonoTime lease_deadline;
    // A sign of life at `now`: the lease runs a full TTL from then. It never moves the deadline
    // earlier (a renewal has no reason to), which keeps ServiceState::earliest_deadline a bound.
    void Renew(MonoTime now);
  };
  struct ServiceState {
    std::map<std::string, Entry> instances;
    std::deque<MonoTime> recent_expiries;  // within the self-preservation window
    bool degraded = false;
    // No instance's lease lapses before this: a lower bound on every `lease_deadline`, so that
    // expiry looks through a service's instances only once one of them may have lapsed (at
    // 100,000 instances a look is ~15 ms under mu_). Renewals leave it; SetLease lowers it;
    // PlanExpiry sets it exactly after a look. min(): not known, look at the next tick.
    MonoTime earliest_deadline = MonoTime::min();
    // Sets an instance's lease deadline to any instant, earlier than before included (a
    // registration, a changed TTL, a load).
    void SetLease(Entry& entry, MonoTime deadline);
    // READY instances, and how many run each version: kept as instances come, change and go
    // (Count / Uncount around every change of an entry's instance), so that a summary of every
    // service -- /ready, /v1/services, /metrics, `ctl status` -- never walks the instances.
    std::size_t ready = 0;
    std::map<std::string, std::size_t> ready_versions;
    void Count(const Instance& in);
    void Uncount(const Instance& in);
  };
  using Key = std::pair<std::string, std::string>;  // service, id

  // What a write decided, under mu_: the writes to commit, or nothing (the view already says it;
  // the plan renewed the lease instead).
  struct Plan {
    std::vector<Write> writes;
  };
  using Planner = std::function<Result<Plan>(MonoTime now, SystemTime system_now)>;
  // A write in the queue.
  struct PendingWrite {
    Key key;  // the instance it writes
    Planner plan;
    Done done;
    int attempts = 0;  // commits of it that lost a compare to another write (shared store)
  };
  // Writes one group commit holds at most: private store, shared store.
  static constexpr std::size_t kMaxBatch = 256;
  static constexpr std::size_t kMaxSharedBatch = 64;
  // Writer threads on a shared store: groups in flight at once.
  static constexpr int kSharedWriters = 2;

  Registry(std::unique_ptr<Store> store, Clock& clock, RegistryOptions options)
      : store_(std::move(store)),
        shared_(store_->shared()),
        clock_(clock),
        options_(std::move(options)) {}

  // Queues one write to the instance `key`, to be planned (under mu_), committed and applied by a
  // writer thread; see the class comment. `done` gets the commit's revision, or the registry's
  // when the plan had nothing to write.
  void Submit(Key key, Planner plan, Done done) DROVER_EXCLUDES(queue_mu_);
  // Runs `start` with a Done and waits for its answer.
  static Result<std::uint64_t> Wait(const std::function<void(Done)>& start);
  void WriterLoop() DROVER_EXCLUDES(write_mu_, mu_, queue_mu_, answer_mu_);
  // A group's answers, each with the write's `done`, in the group's order.
  using AnswerGroup = std::vector<std::pair<Done, Result<std::uint64_t>>>;
  // Answers a committed group: on a private store by the answer thread (which runs AnswerLoop),
  // on a shared store here, on its writer.
  void Answer(AnswerGroup group) DROVER_EXCLUDES(answer_mu_);
  void AnswerLoop() DROVER_EXCLUDES(answer_mu_);
  // Queues `call` to the deploy thread (which runs DeployLoop).
  void Defer(std::function<void()> call) DROVER_EXCLUDES(deploy_mu_);
  void DeployLoop() DROVER_EXCLUDES(deploy_mu_);
  // Each write's answer, in order; nullopt for one that goes back to the queue (a write to an
  // instance already written in this group, or a lost compare on a shared store).
  using Answers = std::vector<std::optional<Result<std::uint64_t>>>;
  // The sets a group commits, and the batch index each one answers.
  struct PlannedGroup {
    std::vector<std::vector<Write>> sets;
    std::vector<std::size_t> owners;
  };
  // Plans each write of `batch` against the view, one per instance; answers those that need no
  // commit (refused, or nothing to write).
  PlannedGroup PlanGroup(const std::vector<PendingWrite>& batch, Answers& answers)
      DROVER_EXCLUDES(mu_);
  // Shared store: a group planned, committed in one store call, then applied here or waited for
  // on the feed (ApplyOwnCommits). A write whose compare was lost stays unanswered (queued
  // again, planned after catching up).
  Answers CommitShared(std::vector<PendingWrite>& batch) DROVER_EXCLUDES(write_mu_, mu_);
  // Shared store whose revisions are consecutive: applies this process's own commits (sets with
  // their revisions, in revision order) for as long as the view stands just before each one, and
  // publishes their events. False when one could not be (something else came first): the feed
  // brings it, and the rest, in order.
  bool ApplyOwnCommits(std::vector<std::pair<std::uint64_t, std::vector<Write>>>& commits)
      DROVER_EXCLUDES(mu_);
  // Private store: plans, commits and applies `batch` as one group.
  Answers CommitBatch(const std::vector<PendingWrite>& batch)
      DROVER_EXCLUDES(write_mu_, mu_, queue_mu_);
  // Applies a committed change to the view and adds its events to `events` (for Publish).
  // Keeps (or replaces) the tombstone of its service and id.
  void KeepTombstoneLocked(Tombstone t) DROVER_REQUIRES(mu_);
  void ApplyLocked(const Change& change, MonoTime now, std::vector<Event>& events)
      DROVER_REQUIRES(mu_);
  // ApplyLocked, then Publish of its events.
  void ApplyAndPublishLocked(const Change& change, MonoTime now) DROVER_REQUIRES(mu_);
  // One store commit that held `writes` writes, for commit_counters().
  void CountCommit(std::uint64_t writes) DROVER_EXCLUDES(queue_mu_);

  // StoreListener (shared stores; the store's feed thread).
  void OnChange(const Change& change) override;
  bool Holds(std::uint64_t revision) override;
  void OnReset(StoreState state) override;
  void OnRenewals(const std::vector<LeaseRenewal>& renewals) override;
  void OnFeedRestored() override;
  void OnDegraded(const std::vector<std::string>& services) override;

  Status ValidateKey(const std::string& service, const std::string& id) const;
  // The live entry, or the error a write of `generation` to a missing/newer entry deserves.
  Result<Entry*> FindForWrite(const std::string& service, const std::string& id,
                              std::uint64_t generation) DROVER_REQUIRES(mu_);
  // Heartbeat()'s renewal of the lease in the view.
  Status RenewLocked(const std::string& service, const std::string& id, std::uint64_t generation,
                     MonoTime now) DROVER_REQUIRES(mu_);
  void Publish(std::vector<Event> events) DROVER_REQUIRES(mu_);
  Event ResyncEvent(const std::string& service) const DROVER_REQUIRES(mu_);
  bool Degraded(const std::string& service) const DROVER_REQUIRES(mu_);
  // Expiry: decides under mu_ which leases go (or freezes a service), then commits per service.
  std::vector<Plan> PlanExpiry(MonoTime now, SystemTime system_now) DROVER_REQUIRES(mu_);
  Status ExpireLeases() DROVER_EXCLUDES(write_mu_, mu_);
  Status PruneTombstones() DROVER_EXCLUDES(write_mu_, mu_);
  void SendProgress(MonoTime now) DROVER_REQUIRES(mu_);
  void AnnounceDegraded(const std::string& service, MonoTime now) DROVER_REQUIRES(mu_);
  std::vector<std::string> DegradedServices() const DROVER_REQUIRES(mu_);
  // Self-preservation as the expirer decided it (a process that does not expire leases).
  void SetDegradedLocked(const std::vector<std::string>& services, MonoTime now)
      DROVER_REQUIRES(mu_);
  // The expirer, on a shared store: tells the others when its set of degraded services changed.
  void ShareDegraded() DROVER_EXCLUDES(write_mu_, mu_);
  void Enqueue(Watcher& watcher, EventPtr event, MonoTime now) DROVER_REQUIRES(mu_);

  std::unique_ptr<Store> store_;
  const bool shared_;
  Clock& clock_;
  const RegistryOptions options_;

  // Held by whoever talks to a private store, from planning to applying (never while holding
  // mu_); on a shared store, by expiry and ShareDegraded only.
  Mutex write_mu_;
  mutable Mutex queue_mu_;  // never held while taking write_mu_ or mu_
  CondVar queue_cv_;        // a write was queued, or the writers stop
  std::deque<PendingWrite> queue_ DROVER_GUARDED_BY(queue_mu_);
  bool stopping_ DROVER_GUARDED_BY(queue_mu_) = false;  // writers finish the queue, then end
  CommitCounters counters_ DROVER_GUARDED_BY(queue_mu_);
  std::vector<std::thread> writers_;
  // A private store's answers of committed groups, run in commit order by their own thread:
  // writing a group's replies takes about as long as committing the next group, which the one
  // writer does meanwhile. (A shared store's writers answer their own groups: see Answer.)
  Mutex answer_mu_;  // never held while taking another lock
  CondVar answer_cv_;
  std::deque<AnswerGroup> answer_queue_ DROVER_GUARDED_BY(answer_mu_);
  bool answers_end_ DROVER_GUARDED_BY(answer_mu_) = false;  // the writers have ended
  std::thread answerer_;
  // The deploy calls of the *Async methods, made by their own thread in the order queued.
  Mutex deploy_mu_;  // never held while taking another lock
  CondVar deploy_cv_;
  std::deque<std::function<void()>> deploy_queue_ DROVER_GUARDED_BY(deploy_mu_);
  bool deploys_end_ DROVER_GUARDED_BY(deploy_mu_) = false;  // the registry is going
  std::thread deployer_;
  mutable Mutex mu_;
  std::uint64_t revision_ DROVER_GUARDED_BY(mu_) = 0;
  std::map<std::string, ServiceState> services_ DROVER_GUARDED_BY(mu_);
  std::map<Key, Tombstone> tombstones_ DROVER_GUARDED_BY(mu_);
  // No tombstone expires before this (a lower bound, as ServiceState::earliest_deadline is for
  // leases): pruning looks through the tombstones only once one may be due.
  SystemTime tombstones_due_ DROVER_GUARDED_BY(mu_) = SystemTime::min();
  std::deque<EventPtr> history_ DROVER_GUARDED_BY(mu_);     // PUT/DELETE only
  std::uint64_t history_floor_ DROVER_GUARDED_BY(mu_) = 0;  // events <= this are gone
  std::size_t history_bytes_ DROVER_GUARDED_BY(mu_) = 0;    // EventBytes of history_
  std::vector<std::weak_ptr<Watcher>> watchers_ DROVER_GUARDED_BY(mu_);
  // The degraded services last written to a shared store (none yet: write the first decision).
  std::optional<std::vector<std::string>> shared_degraded_ DROVER_GUARDED_BY(write_mu_);
  // Whether this process expired leases at its last Tick (the store's answer, kept for the feed's
  // callbacks, which may run while the store is being destroyed).
  std::atomic<bool> expirer_{false};
};

}  // namespace drover::registry
