// EtcdStore: the registry's shared Store over an etcd cluster (REG-7), through etcd's gRPC v3 API
// (proto/etcd: the subset Drover uses, with etcd's own names and field numbers). Several registry
// processes over one prefix make one registry: etcd holds the truth and orders every commit;
// each process keeps a view fed by one etcd watch.
//
// Keys under `prefix` (default /drover/registry):
//   <prefix>/instances/<service>/<id>   an instance (JSON); mod_revision = the registry's
//   <prefix>/tombstones/<service>/<id>  a tombstone (JSON, with the reason of the removal)
//   <prefix>/last                       touched by every commit: its mod_revision is the revision
//                                       of the latest registry change
//   <prefix>/expirer                    the process that expires leases (with its session lease)
//   <prefix>/renewals/<process>         the lease renewals a process accepted in its last batch
//                                       (with its session lease)
//   <prefix>/degraded                   the services the expirer holds in self-preservation, so
//                                       every process reports the same `degraded`
//   <prefix>/deploys/<service>/<id>     a deploy (JSON: its record and when it was first stored);
//                                       its version is etcd's per-key version
//   <prefix>/active/<service>           the id of the service's running deploy
// The feed sees deploy keys and skips them: they make no registry revision and no event.
//
// - Commits are one etcd Txn: each instance precondition is a compare on the key's mod_revision
//   (0: absent), so a compare lost to another process is ABORTED and nothing is written. The
//   registry revision is etcd's revision. A process that lost a compare waits until its feed
//   has delivered <prefix>/last's revision, then decides again.
// - The feed is one Watch over the prefix with require-leader, resumed from the last delivered
//   revision + 1 after any break (never from "now"); only events count as delivered (etcd 3.4's
//   progress notifications may run ahead of events); when etcd has compacted past that revision
//   the store reloads everything and reports a reset (the registry sends RESYNC). Every event of
//   one revision is delivered as one Change.
// - Expirer: each process holds a session lease (TTL `session_ttl`, kept alive every third of it)
//   and campaigns for <prefix>/expirer with a create-if-absent Txn. Expiry commits carry a compare
//   on that key's create_revision, so a process that lost the role cannot expire anything. If
//   the expirer dies its session lapses and another process takes over within about one TTL.
// - Renewals: heartbeats accepted here are batched every `renewal_flush` into one Put, which the
//   other processes read from their feed; `expiry_grace` is what the expirer allows for that.
// - Endpoints: host:port of every member, resolved at Open and, when some are DNS names, again
//   after a failed call or a broken feed (at most once a second): when they name other addresses
//   now, the store connects there. One gRPC channel balancing round robin over the members that
//   are up, with HTTP/2 keepalive; every call has a deadline;
//   a try that fails or times out is repeated within the call's deadline -- safe because every
//   commit is guarded by its compares.
//
// Thread-safe. Two threads of its own: the feed and the session keeper.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "registry/store.h"

namespace drover::registry {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "host:port" of etcd members (client URLs)
  // Resolves one endpoint to "ip:port" ("[v6]:port"); default getaddrinfo. Tests give their own.
  std::function<Result<std::string>(const std::string& endpoint)> resolve;
  std::string prefix = "/drover/registry";
  // Names this process in <prefix>/expirer and <prefix>/renewals/; default host:pid:random.
  std::string process_name;
  Duration call_timeout = std::chrono::seconds(5);
  // One try of a call; a try that times out (say, while etcd elects a leader) is repeated
  // within call_timeout.
  Duration attempt_timeout = std::chrono::seconds(2);
  Duration session_ttl = std::chrono::seconds(5);  // whole seconds; etcd may raise small ones
  Duration renewal_flush = std::chrono::milliseconds(100);
  // How long after a lapsed deadline the expirer still waits for a renewal batch from another
  // process (RenewalDelay): the flush interval plus etcd's write and watch latency, with room.
  Duration expiry_grace = std::chrono::milliseconds(500);
};

class EtcdStore final : public Store {
 public:
  // Connects (UNAVAILABLE when no member answers within call_timeout), grants the session
  // lease and campaigns once for the expirer role, so a lone registry expires from the start.
  static Result<std::unique_ptr<EtcdStore>> Open(EtcdOptions options);
  // Stops both threads and revokes the session lease: the expirer role passes at once.
  ~EtcdStore() override;

  Result<StoreState> Load() override;
  Result<std::uint64_t> Commit(const std::vector<Write>& writes) override;
  // One Txn per kMaxSetsPerTxn sets (etcd's --max-txn-ops is 128 by default), its success branch
  // holding each set as a nested Txn with its own compares (etcd 3.3+): every set whose compares
  // hold is written, all at that Txn's one revision; the others are ABORTED.
  Result<std::vector<Result<std::uint64_t>>> CommitBatch(
      const std::vector<std::vector<Write>>& batch) override;
  static constexpr std::size_t kMaxSetsPerTxn = 64;
  Status PruneTombstones(const std::vector<Tombstone>& expired) override;
  Result<std::optional<StoredDeploy>> GetDeploy(const std::string& id) override;
  Result<std::vector<StoredDeploy>> ListDeploys(const std::string& service,
                                                std::size_t limit) override;
  Result<std::uint64_t> PutDeploy(const StoredDeploy& deploy,
                                  std::uint64_t expect_version) override;

  bool shared() const override { return true; }
  Status Follow(std::uint64_t revision, StoreListener* listener) override;
  Status WaitDelivered(std::uint64_t revision, Duration timeout) override;
  Result<std::uint64_t> Head() override;
  // Every Txn this store makes writes (<prefix>/last at least) and takes exactly one revision.
  bool consecutive_revisions() const override { return true; }
  bool Expirer() const override;
  Result<std::uint64_t> CommitAsExpirer(const std::vector<Write>& writes) override;
  void ShareRenewals(const std::vector<LeaseRenewal>& renewals) override;
  Status ShareDegraded(const std::vector<std::string>& services) override;
  Duration RenewalDelay() const override;

  const std::string& process_name() const;

  // Tests: drop the feed's watch and keep it down until resumed (what a long network cut does).
  void PauseFeedForTesting(bool paused);

  struct Impl;

 private:
  explicit EtcdStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::registry
