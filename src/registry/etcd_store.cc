#include "registry/etcd_store.h"

#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "common/host_port.h"
#include "common/thread_name.h"
#include "drover/mutex.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "registry/json_codec.h"

namespace drover::registry {
namespace {

namespace pb = ::etcdserverpb;
using json = nlohmann::json;
using namespace std::chrono_literals;

// The end of the range of keys starting with `prefix` (etcd's "prefix + 1").
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// A commit whose compares did not hold.
constexpr const char* kLostCompare =
    "precondition failed: another registry process changed the row";

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  StatusCode code = static_cast<StatusCode>(s.error_code());
  // etcd's own refusals that a retry elsewhere may cure are reported as unavailable.
  if (code == StatusCode::kUnknown) code = StatusCode::kUnavailable;
  return Status(code, "etcd " + what + ": " + s.error_message());
}

// Resolves "host:port" to "ip:port" (IPv4 or [IPv6]) for the channel's static address list.
Result<std::string> Resolve(const std::string& endpoint) {
  DROVER_ASSIGN_OR_RETURN(const HostPort hp, ParseHostPort(endpoint, "etcd endpoint"));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(hp.port);
  const int rc = ::getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return InvalidArgumentError("etcd endpoint '" + endpoint + "': " + ::gai_strerror(rc));
  }
  char ip[NI_MAXHOST];
  const int ni =
      ::getnameinfo(found->ai_addr, found->ai_addrlen, ip, sizeof ip, nullptr, 0, NI_NUMERICHOST);
  const bool v6 = found->ai_family == AF_INET6;
  ::freeaddrinfo(found);
  if (ni != 0) return InvalidArgumentError("etcd endpoint '" + endpoint + "' does not resolve");
  return HostPort{ip, hp.port, v6 ? HostKind::kIpv6 : HostKind::kIpv4}.ToString();
}

std::string DefaultProcessName() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  char suffix[9];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  return std::string(host) + ":" + std::to_string(::getpid()) + ":" + suffix;
}

// --- Values --------------------------------------------------------------------------------

std::string EncodeInstance(const Instance& in, bool create) {
  // create_revision 0: this incarnation was created by the write that carries it (its revision).
  return StoredInstanceJson(in.spec, create ? 0 : in.create_revision,
                            in.ready_since == SystemTime{} ? 0 : ToUnixMillis(in.ready_since));
}

Result<Instance> DecodeInstance(const std::string& value, bool& created_here) {
  Result<StoredInstance> stored = StoredInstanceFromJson(value);
  if (!stored.ok()) {
    return InternalError("undecodable instance in etcd: " + stored.status().message());
  }
  Instance in;
  in.spec = std::move(stored->spec);
  in.create_revision = stored->create_revision;
  created_here = in.create_revision == 0;
  in.ready_since =
      stored->ready_since_ms == 0 ? SystemTime{} : FromUnixMillis(stored->ready_since_ms);
  return in;
}

// "<prefix><service>/<id>" -> {service, id}; nullopt for a key of another shape.
std::optional<std::pair<std::string, std::string>> SplitKey(const std::string& key,
                                                            const std::string& prefix) {
  const std::size_t slash = key.find('/', prefix.size());
  if (!key.starts_with(prefix) || slash == std::string::npos) return std::nullopt;
  return std::pair{key.substr(prefix.size(), slash - prefix.size()), key.substr(slash + 1)};
}

std::string EncodeTombstone(const Tombstone& t, RemovalReason reason) {
  return json{{"generation", t.generation},
              {"expires_at_ms", ToUnixMillis(t.expires_at)},
              {"reason", static_cast<int>(reason)}}
      .dump();
}

Result<Tombstone> DecodeTombstone(const std::string& value, RemovalReason* reason) {
  try {
    const json j = json::parse(value);
    Tombstone t;
    t.generation = j.at("generation").get<std::uint64_t>();
    t.expires_at = FromUnixMillis(j.at("expires_at_ms").get<std::int64_t>());
    if (reason != nullptr) {
      const int r = j.value("reason", static_cast<int>(RemovalReason::kDeregister));
      *reason = r >= 0 && r <= static_cast<int>(RemovalReason::kFence)
                    ? static_cast<RemovalReason>(r)
                    : RemovalReason::kDeregister;
    }
    return t;
  } catch (const std::exception& e) {
    return InternalError(std::string("undecodable tombstone in etcd: ") + e.what());
  }
}

// <prefix>/degraded: {"services": [...]}. Undecodable: none (and a warning), never a stuck flag.
std::vector<std::string> DecodeDegraded(const std::string& value) {
  try {
    return json::parse(value).at("services").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    spdlog::warn("registry: undecodable self-preservation state in etcd: {}", e.what());
    return {};
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct EtcdStore::Impl {
  EtcdOptions options;
  std::string instances_prefix, tombstones_prefix, renewals_prefix, expirer_key, renewal_key,
      last_key, degraded_key;
  // The channel to the members' addresses as last resolved, and its stubs. A re-resolution that
  // finds other addresses adds a new set; old ones stay until the store goes (a call in flight
  // may use one), so a pointer read here is valid for the store's life.
  struct Stubs {
    std::string target;  // "ipv4:a:p,b:p"
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<pb::KV::Stub> kv;
    std::unique_ptr<pb::Watch::Stub> watch;
    std::unique_ptr<pb::Lease::Stub> lease;
  };
  mutable std::atomic<const Stubs*> stubs{nullptr};
  mutable Mutex resolve_mu;
  mutable std::vector<std::unique_ptr<Stubs>> all_stubs DROVER_GUARDED_BY(resolve_mu);
  mutable MonoTime resolved_at DROVER_GUARDED_BY(resolve_mu){};
  bool any_names = false;  // some endpoint is a DNS name: worth resolving again
  pb::KV::Stub* kv() const { return stubs.load()->kv.get(); }
  pb::Watch::Stub* watch() const { return stubs.load()->watch.get(); }
  pb::Lease::Stub* lease() const { return stubs.load()->lease.get(); }
  const std::string& target() const { return stubs.load()->target; }
  // Resolves every endpoint; INVALID_ARGUMENT when one does not resolve.
  Result<std::string> ResolveTarget() const;
  // Connects to `target` (a new channel and stubs) and makes it the current one.
  void UseTarget(const std::string& target) const DROVER_REQUIRES(resolve_mu);
  // After a failure: resolves the endpoints' names again (at most once a second) and moves to the
  // addresses they name now, if they changed (a member replaced, moved, scaled).
  void Reresolve() const;

  std::atomic<bool> stopping{false};

  // Feed.
  StoreListener* listener = nullptr;
  std::thread feed_thread;
  Mutex feed_mu;
  CondVar feed_cv;
  // Every change <= this was delivered.
  std::uint64_t delivered DROVER_GUARDED_BY(feed_mu) = 0;
  // Writes waiting for the feed to deliver their revision, each woken only once it is: with
  // many writes in flight, a delivery must not wake them all.
  std::multimap<std::uint64_t, CondVar*> delivery_waiters DROVER_GUARDED_BY(feed_mu);
  bool paused DROVER_GUARDED_BY(feed_mu) = false;
  Mutex stream_mu;
  grpc::ClientContext* feed_context DROVER_GUARDED_BY(stream_mu) = nullptr;

  // Session and role.
  std::thread keeper_thread;
  Mutex keeper_mu;
  CondVar keeper_cv;
  std::int64_t session = 0;                              // keeper thread only (after Open)
  std::atomic<std::int64_t> expirer_create_revision{0};  // 0: not the expirer
  std::atomic<std::int64_t> session_ok_ms{0};            // steady ms of the last good keepalive
  std::map<std::pair<std::string, std::string>, std::uint64_t> pending_renewals
      DROVER_GUARDED_BY(keeper_mu);

  std::unique_ptr<grpc::ClientContext> Context(
      std::chrono::system_clock::time_point deadline = {}) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (deadline == std::chrono::system_clock::time_point{}) {
      deadline = std::chrono::system_clock::now() + options.call_timeout;
    }
    ctx->set_deadline(deadline);
    // A member cut off from its cluster's leader refuses rather than answer stale.
    ctx->AddMetadata("hasleader", "true");
    return ctx;
  }

  // Runs a unary call within call_timeout, each attempt within attempt_timeout: a call that
  // never reached etcd, or that a member holds while its cluster elects a new leader, is tried
  // again (on whichever member is up) -- safe, since every commit is guarded by compares and a
  // repeated one that had in fact succeeded fails its compares and is caught up with.
  template <typename Call>
  grpc::Status Retry(Call call) const {
    const auto give_up = std::chrono::system_clock::now() + options.call_timeout;
    Duration backoff = 50ms;
    for (;;) {
      const auto attempt_end =
          std::min(give_up, std::chrono::system_clock::now() + options.attempt_timeout);
      auto ctx = Context(attempt_end);
      grpc::Status s = call(*ctx);
      const bool again = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (s.ok() || !again || stopping) return s;
      Reresolve();
      if (std::chrono::system_clock::now() + backoff >= give_up) return s;
      std::this_thread::sleep_for(backoff);
      backoff = std::min<Duration>(backoff * 2, 500ms);
    }
  }

  std::string InstanceKey(const std::string& service, const std::string& id) const {
    return instances_prefix + service + "/" + id;
  }
  std::string TombstoneKey(const std::string& service, const std::string& id) const {
    return tombstones_prefix + service + "/" + id;
  }

  static std::int64_t SteadyMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // A Txn sent with Retry, its answer in `resp`; the failure names `what`.
  Status SendTxn(const pb::TxnRequest& req, pb::TxnResponse& resp, std::string_view what) const {
    const grpc::Status s =
        Retry([&](grpc::ClientContext& ctx) { return kv()->Txn(&ctx, req, &resp); });
    if (!s.ok()) return FromGrpc(s, std::string(what));
    return Status::Ok();
  }
  Result<pb::TxnResponse> SendTxn(const pb::TxnRequest& req, std::string_view what) const {
    pb::TxnResponse resp;
    DROVER_RETURN_IF_ERROR(SendTxn(req, resp, what));
    return resp;
  }
  // The compares and operations of one commit, added to `req` (without `last`).
  void FillTxn(const std::vector<Write>& writes, pb::TxnRequest& req) const;
  Result<std::uint64_t> Txn(const std::vector<Write>& writes, bool as_expirer);
  // Sets [from, to) of `batch` in one Txn, each a nested Txn with its own compares (one set:
  // not nested); appends one result per set, or returns the call's failure.
  Status TxnOfSets(const std::vector<std::vector<Write>>& batch, std::size_t from, std::size_t to,
                   std::vector<Result<std::uint64_t>>& results);
  // Every commit also touches <prefix>/last, whose mod_revision is then the revision of the
  // latest registry commit: what a process that lost a compare must see before deciding again.
  void MarkLast(pb::TxnRequest& req) const {
    pb::PutRequest* put = req.add_success()->mutable_request_put();
    put->set_key(last_key);
    put->set_value(options.process_name);
  }
  Status RangeAll(const std::string& prefix, std::int64_t& revision,
                  std::vector<mvccpb::KeyValue>& out);
  Result<StoreState> Load();

  void FeedLoop(std::uint64_t from);
  void Deliver(const pb::WatchResponse& response);
  void SetDelivered(std::uint64_t revision) {
    MutexLock lock(feed_mu);
    delivered = std::max(delivered, revision);
    const auto end = delivery_waiters.upper_bound(delivered);
    for (auto it = delivery_waiters.begin(); it != end; ++it) it->second->NotifyOne();
    delivery_waiters.erase(delivery_waiters.begin(), end);
  }
  void KeeperLoop();
  bool GrantSession();
  bool KeepAlive();
  void Campaign();
  void FlushRenewals();
  void RevokeSession();
};

void EtcdStore::Impl::FillTxn(const std::vector<Write>& writes, pb::TxnRequest& req) const {
  // A removal's reason travels in the tombstone written with it.
  std::map<std::pair<std::string, std::string>, RemovalReason> reasons;
  for (const Write& w : writes) {
    if (w.kind == Write::Kind::kDeleteInstance) reasons[{w.service, w.id}] = w.reason;
  }
  for (const Write& w : writes) {
    if (w.expect_mod_revision) {
      pb::Compare* c = req.add_compare();
      c->set_key(InstanceKey(w.service, w.id));
      c->set_target(pb::Compare::MOD);
      c->set_result(pb::Compare::EQUAL);
      c->set_mod_revision(static_cast<std::int64_t>(*w.expect_mod_revision));
    }
    pb::RequestOp* op = req.add_success();
    switch (w.kind) {
      case Write::Kind::kPutInstance:
        op->mutable_request_put()->set_key(InstanceKey(w.service, w.id));
        op->mutable_request_put()->set_value(EncodeInstance(w.instance, w.create));
        break;
      case Write::Kind::kDeleteInstance:
        op->mutable_request_delete_range()->set_key(InstanceKey(w.service, w.id));
        break;
      case Write::Kind::kPutTombstone: {
        auto reason = reasons.find({w.service, w.id});
        op->mutable_request_put()->set_key(TombstoneKey(w.service, w.id));
        op->mutable_request_put()->set_value(EncodeTombstone(
            w.tombstone, reason == reasons.end() ? RemovalReason::kDeregister : reason->second));
        break;
      }
      case Write::Kind::kDeleteTombstone:
        op->mutable_request_delete_range()->set_key(TombstoneKey(w.service, w.id));
        break;
    }
  }
}

namespace {

// Options for a protobuf arena whose first block is `block` (on the caller's stack): the many
// small messages of a Txn or a feed answer are carved from it -- a larger one's from blocks the
// arena adds -- and freed together instead of one by one.
google::protobuf::ArenaOptions StackArena(char* block, std::size_t size) {
  google::protobuf::ArenaOptions options;
  options.initial_block = block;
  options.initial_block_size = size;
  options.start_block_size = 16 << 10;
  options.max_block_size = 256 << 10;
  return options;
}

// A commit's Txn and its answer (a nested Txn, compare, put and their strings per set; a header
// and a put's answer per set back) on one such arena, made on the writer's stack.
struct TxnMessages {
  alignas(16) char block[16 << 10];  // about a group of 16 registrations, both ways
  google::protobuf::Arena arena{StackArena(block, sizeof block)};
  pb::TxnRequest& req = *google::protobuf::Arena::CreateMessage<pb::TxnRequest>(&arena);
  pb::TxnResponse& resp = *google::protobuf::Arena::CreateMessage<pb::TxnResponse>(&arena);
};

}  // namespace

Result<std::uint64_t> EtcdStore::Impl::Txn(const std::vector<Write>& writes, bool as_expirer) {
  TxnMessages txn;
  pb::TxnRequest& req = txn.req;
  if (as_expirer) {
    const std::int64_t role = expirer_create_revision.load();
    if (role == 0) return AbortedError("this process is not the expirer");
    pb::Compare* c = req.add_compare();
    c->set_key(expirer_key);
    c->set_target(pb::Compare::CREATE);
    c->set_result(pb::Compare::EQUAL);
    c->set_create_revision(role);
  }
  FillTxn(writes, req);
  MarkLast(req);
  const pb::TxnResponse& resp = txn.resp;
  DROVER_RETURN_IF_ERROR(SendTxn(req, txn.resp, "txn"));
  if (!resp.succeeded()) {
    return AbortedError(as_expirer ? "precondition failed: a row changed, or this process is no "
                                     "longer the expirer"
                                   : kLostCompare);
  }
  return static_cast<std::uint64_t>(resp.header().revision());
}

Status EtcdStore::Impl::TxnOfSets(const std::vector<std::vector<Write>>& batch, std::size_t from,
                                  std::size_t to, std::vector<Result<std::uint64_t>>& results) {
  if (to - from == 1) {
    Result<std::uint64_t> rev = Txn(batch[from], false);
    if (!rev.ok() && rev.status().code() != StatusCode::kAborted) return rev.status();
    results.push_back(std::move(rev));
    return Status::Ok();
  }
  TxnMessages txn;
  pb::TxnRequest& req = txn.req;
  for (std::size_t i = from; i < to; ++i)
    FillTxn(batch[i], *req.add_success()->mutable_request_txn());
  MarkLast(req);
  const pb::TxnResponse& resp = txn.resp;
  DROVER_RETURN_IF_ERROR(
      SendTxn(req, txn.resp, "txn of " + std::to_string(to - from) + " commits"));
  if (resp.responses_size() < static_cast<int>(to - from)) {
    return InternalError("etcd answered a txn of " + std::to_string(to - from) + " commits with " +
                         std::to_string(resp.responses_size()) + " responses");
  }
  const auto revision = static_cast<std::uint64_t>(resp.header().revision());
  for (std::size_t i = 0; i < to - from; ++i) {
    if (resp.responses(static_cast<int>(i)).response_txn().succeeded()) {
      results.emplace_back(revision);
    } else {
      results.emplace_back(AbortedError(kLostCompare));
    }
  }
  return Status::Ok();
}

Status EtcdStore::Impl::RangeAll(const std::string& prefix, std::int64_t& revision,
                                 std::vector<mvccpb::KeyValue>& out) {
  std::string from = prefix;
  const std::string end = PrefixEnd(prefix);
  for (;;) {
    pb::RangeRequest req;
    req.set_key(from);
    req.set_range_end(end);
    req.set_limit(1000);
    req.set_revision(revision);  // 0 on the first page: now; then that same revision
    pb::RangeResponse resp;
    const grpc::Status s =
        Retry([&](grpc::ClientContext& ctx) { return kv()->Range(&ctx, req, &resp); });
    if (!s.ok()) return FromGrpc(s, "range " + prefix);
    if (revision == 0) revision = resp.header().revision();
    for (auto& kv_pair : *resp.mutable_kvs()) out.push_back(std::move(kv_pair));
    if (!resp.more() || resp.kvs_size() == 0) return Status::Ok();
    from = out.back().key() + std::string(1, '\0');
  }
}

Result<StoreState> EtcdStore::Impl::Load() {
  // Both ranges at one revision: one consistent state.
  std::int64_t revision = 0;
  std::vector<mvccpb::KeyValue> instances, tombstones;
  DROVER_RETURN_IF_ERROR(RangeAll(instances_prefix, revision, instances));
  DROVER_RETURN_IF_ERROR(RangeAll(tombstones_prefix, revision, tombstones));
  std::vector<mvccpb::KeyValue> degraded;
  DROVER_RETURN_IF_ERROR(RangeAll(degraded_key, revision, degraded));
  StoreState state;
  state.revision = static_cast<std::uint64_t>(revision);
  for (const mvccpb::KeyValue& kv_pair : degraded) {
    if (kv_pair.key() == degraded_key) state.degraded = DecodeDegraded(kv_pair.value());
  }
  for (const mvccpb::KeyValue& kv_pair : instances) {
    auto name = SplitKey(kv_pair.key(), instances_prefix);
    if (!name) continue;
    bool created_here = false;
    DROVER_ASSIGN_OR_RETURN(Instance in, DecodeInstance(kv_pair.value(), created_here));
    std::tie(in.service, in.id) = std::move(*name);
    in.mod_revision = static_cast<std::uint64_t>(kv_pair.mod_revision());
    if (created_here) in.create_revision = in.mod_revision;
    state.instances.push_back(std::move(in));
  }
  for (const mvccpb::KeyValue& kv_pair : tombstones) {
    auto name = SplitKey(kv_pair.key(), tombstones_prefix);
    if (!name) continue;
    DROVER_ASSIGN_OR_RETURN(Tombstone t, DecodeTombstone(kv_pair.value(), nullptr));
    std::tie(t.service, t.id) = std::move(*name);
    t.revision = static_cast<std::uint64_t>(kv_pair.mod_revision());
    state.tombstones.push_back(std::move(t));
  }
  return state;
}

// --- Feed ----------------------------------------------------------------------------------

void EtcdStore::Impl::Deliver(const pb::WatchResponse& response) {
  const auto& events = response.events();
  for (int i = 0; i < events.size();) {
    const std::int64_t revision = events[i].kv().mod_revision();
    int end = i;
    while (end < events.size() && events[end].kv().mod_revision() == revision) ++end;
    Change change;
    change.revision = static_cast<std::uint64_t>(revision);
    // A revision the listener holds already (this process's own commit, applied by its writer
    // when the Txn's answer beat the feed) is not decoded again: OnChange would drop it.
    const bool held = listener->Holds(change.revision);
    // A removal's reason is in the tombstone written in the same revision (in either order).
    std::map<std::pair<std::string, std::string>, RemovalReason> reasons;
    for (int k = i; k < end; ++k) {
      const mvccpb::Event& e = events[k];
      const std::string& key = e.kv().key();
      const bool put = e.type() == mvccpb::Event::PUT;
      if (key.starts_with(renewals_prefix)) {
        if (!put || key == renewal_key) continue;
        std::vector<LeaseRenewal> renewals;
        try {
          // Named: a range-for over a member of a temporary would iterate a destroyed object.
          const json batch = json::parse(e.kv().value());
          for (const json& r : batch.at("r")) {
            renewals.push_back(LeaseRenewal{r.at(0).get<std::string>(), r.at(1).get<std::string>(),
                                            r.at(2).get<std::uint64_t>()});
          }
        } catch (const std::exception& ex) {
          spdlog::warn("registry: undecodable lease renewals at {}: {}", key, ex.what());
          continue;
        }
        listener->OnRenewals(renewals);
        continue;
      }
      if (key == degraded_key) {
        listener->OnDegraded(put ? DecodeDegraded(e.kv().value()) : std::vector<std::string>{});
        continue;
      }
      if (held) continue;
      const bool instance = key.starts_with(instances_prefix);
      auto name = SplitKey(key, instance ? instances_prefix : tombstones_prefix);
      if (!name) continue;
      Write w;
      std::tie(w.service, w.id) = std::move(*name);
      if (instance && put) {
        bool created_here = false;
        Result<Instance> in = DecodeInstance(e.kv().value(), created_here);
        if (!in.ok()) {
          spdlog::error("registry: skipping {}: {}", key, in.status().ToString());
          continue;
        }
        w.kind = Write::Kind::kPutInstance;
        w.instance = std::move(*in);
        w.create = created_here;
      } else if (instance) {
        w.kind = Write::Kind::kDeleteInstance;  // its reason: below
      } else if (put) {
        RemovalReason reason = RemovalReason::kDeregister;
        Result<Tombstone> t = DecodeTombstone(e.kv().value(), &reason);
        if (!t.ok()) {
          spdlog::error("registry: skipping {}: {}", key, t.status().ToString());
          continue;
        }
        w.kind = Write::Kind::kPutTombstone;
        w.tombstone = std::move(*t);
        reasons[{w.service, w.id}] = reason;
      } else {
        w.kind = Write::Kind::kDeleteTombstone;
      }
      change.writes.push_back(std::move(w));
    }
    for (Write& w : change.writes) {
      if (w.kind != Write::Kind::kDeleteInstance) continue;
      auto reason = reasons.find({w.service, w.id});
      if (reason != reasons.end()) w.reason = reason->second;
    }
    if (!change.writes.empty()) listener->OnChange(change);
    SetDelivered(change.revision);
    i = end;
  }
}

void EtcdStore::Impl::FeedLoop(std::uint64_t from) {
  std::uint64_t next = from + 1;
  Duration backoff = 100ms;
  bool broken = false;  // a stream broke since the last one was created
  while (!stopping) {
    {
      MutexLock lock(feed_mu);
      feed_cv.Wait(feed_mu, [&]() DROVER_REQUIRES(feed_mu) { return stopping || !paused; });
      if (stopping) return;
    }
    grpc::ClientContext ctx;
    ctx.AddMetadata("hasleader", "true");
    auto stream = watch()->Watch(&ctx);
    {
      MutexLock lock(stream_mu);
      feed_context = &ctx;
      pb::WatchRequest req;
      pb::WatchCreateRequest* create = req.mutable_create_request();
      create->set_key(options.prefix + "/");
      create->set_range_end(PrefixEnd(options.prefix + "/"));
      create->set_start_revision(static_cast<std::int64_t>(next));
      stream->Write(req);
    }
    {
      // A pause or stop that came before the context was published.
      MutexLock lock(feed_mu);
      if (paused || stopping) ctx.TryCancel();
    }
    bool reload = false;
    for (;;) {
      // Each answer on an arena of its own, its first block on this stack: its events' messages
      // and strings are carved from it and freed at once (a reused message would free and
      // allocate them anew).
      alignas(16) char block[16 << 10];
      google::protobuf::Arena arena(StackArena(block, sizeof block));
      pb::WatchResponse& resp = *google::protobuf::Arena::CreateMessage<pb::WatchResponse>(&arena);
      if (!stream->Read(&resp)) break;
      backoff = 100ms;
      if (resp.created() && broken) {
        broken = false;
        listener->OnFeedRestored();
      }
      if (resp.compact_revision() > 0) {
        spdlog::warn(
            "registry: etcd compacted past revision {} (compact revision {}); reloading the "
            "registry state",
            next, resp.compact_revision());
        reload = true;
        break;
      }
      if (resp.canceled()) {
        spdlog::warn("registry: etcd cancelled the watch: {}", resp.cancel_reason());
        break;
      }
      Deliver(resp);
      if (!resp.events().empty()) {
        next = static_cast<std::uint64_t>(resp.events().rbegin()->kv().mod_revision()) + 1;
      }
    }
    {
      MutexLock lock(stream_mu);
      feed_context = nullptr;
    }
    ctx.TryCancel();
    const grpc::Status status = stream->Finish();
    if (stopping) return;
    broken = true;
    if (!status.ok()) Reresolve();
    if (reload) {
      Result<StoreState> state = Load();
      if (state.ok()) {
        next = state->revision + 1;
        const std::uint64_t revision = state->revision;
        listener->OnReset(std::move(*state));
        SetDelivered(revision);
        continue;
      }
      spdlog::error("registry: reloading from etcd failed: {}", state.status().ToString());
    } else if (!status.ok()) {
      spdlog::warn("registry: etcd watch broke ({}); resuming from revision {}",
                   status.error_message(), next);
    }
    MutexLock lock(feed_mu);
    feed_cv.WaitFor(feed_mu, backoff, [&] { return stopping.load(); });
    backoff = std::min<Duration>(backoff * 2, 2s);
  }
}

// --- Session, role, renewals ---------------------------------------------------------------

bool EtcdStore::Impl::GrantSession() {
  pb::LeaseGrantRequest req;
  req.set_ttl(std::max<std::int64_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(options.session_ttl).count()));
  pb::LeaseGrantResponse resp;
  auto ctx = Context();
  const grpc::Status s = lease()->LeaseGrant(ctx.get(), req, &resp);
  if (!s.ok() || resp.id() == 0) {
    spdlog::warn("registry: etcd lease grant failed: {}",
                 s.ok() ? resp.error() : s.error_message());
    return false;
  }
  session = resp.id();
  session_ok_ms = SteadyMs();
  return true;
}

bool EtcdStore::Impl::KeepAlive() {
  auto ctx = Context();
  auto stream = lease()->LeaseKeepAlive(ctx.get());
  pb::LeaseKeepAliveRequest req;
  req.set_id(session);
  pb::LeaseKeepAliveResponse resp;
  const bool answered = stream->Write(req) && stream->Read(&resp);
  stream->WritesDone();
  ctx->TryCancel();
  stream->Finish();
  if (!answered) return false;
  if (resp.ttl() <= 0) {  // the lease is gone: so is everything attached to it
    session = 0;
    expirer_create_revision = 0;
    return false;
  }
  session_ok_ms = SteadyMs();
  return true;
}

void EtcdStore::Impl::Campaign() {
  pb::TxnRequest req;
  pb::Compare* absent = req.add_compare();
  absent->set_key(expirer_key);
  absent->set_target(pb::Compare::CREATE);
  absent->set_result(pb::Compare::EQUAL);
  absent->set_create_revision(0);
  pb::PutRequest* put = req.add_success()->mutable_request_put();
  put->set_key(expirer_key);
  put->set_value(options.process_name);
  put->set_lease(session);
  req.add_failure()->mutable_request_range()->set_key(expirer_key);
  pb::TxnResponse resp;
  auto ctx = Context();
  if (!kv()->Txn(ctx.get(), req, &resp).ok()) return;
  std::int64_t holder_revision = 0;
  std::string holder;
  if (resp.succeeded()) {
    holder_revision = resp.header().revision();
    holder = options.process_name;
  } else if (resp.responses_size() == 1 && resp.responses(0).response_range().kvs_size() == 1) {
    const mvccpb::KeyValue& kv_pair = resp.responses(0).response_range().kvs(0);
    holder = kv_pair.value();
    holder_revision = kv_pair.create_revision();
    // Ours only if held with this very session (not a previous one of this process).
    if (kv_pair.lease() != session) holder.clear();
  }
  const std::int64_t before =
      expirer_create_revision.exchange(holder == options.process_name ? holder_revision : 0);
  if (before == 0 && holder == options.process_name) {
    spdlog::info("registry: this process ({}) now expires leases", options.process_name);
  } else if (before != 0 && holder != options.process_name) {
    spdlog::warn("registry: this process no longer expires leases (held by {})",
                 holder.empty() ? "nobody" : holder);
  }
}

void EtcdStore::Impl::FlushRenewals() {
  if (session == 0) return;  // kept until there is a session to attach them to
  std::map<std::pair<std::string, std::string>, std::uint64_t> batch;
  {
    MutexLock lock(keeper_mu);
    batch.swap(pending_renewals);
  }
  if (batch.empty()) return;
  json list = json::array();
  for (const auto& [key, generation] : batch) list.push_back({key.first, key.second, generation});
  pb::PutRequest req;
  req.set_key(renewal_key);
  req.set_value(json{{"r", list}}.dump());
  req.set_lease(session);
  pb::PutResponse resp;
  auto ctx = Context();
  const grpc::Status s = kv()->Put(ctx.get(), req, &resp);
  if (!s.ok()) {
    // Kept for the next try (newer renewals of the same instance win).
    spdlog::debug("registry: sharing lease renewals failed: {}", s.error_message());
    MutexLock lock(keeper_mu);
    pending_renewals.merge(batch);
  }
}

void EtcdStore::Impl::RevokeSession() {
  if (session == 0) return;
  pb::LeaseRevokeRequest req;
  req.set_id(session);
  pb::LeaseRevokeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 1s);
  (void)lease()->LeaseRevoke(&ctx, req, &resp);
  session = 0;
  expirer_create_revision = 0;
}

void EtcdStore::Impl::KeeperLoop() {
  const auto ttl = options.session_ttl;
  auto next_keepalive = std::chrono::steady_clock::now() + ttl / 3;
  auto next_campaign = std::chrono::steady_clock::now() + ttl / 5;
  while (!stopping) {
    {
      MutexLock lock(keeper_mu);
      keeper_cv.WaitFor(keeper_mu, options.renewal_flush, [&] { return stopping.load(); });
      if (stopping) break;
    }
    FlushRenewals();
    const auto now = std::chrono::steady_clock::now();
    if (session == 0) {
      if (GrantSession()) next_keepalive = now + ttl / 3;
    } else if (now >= next_keepalive) {
      if (KeepAlive()) {
        next_keepalive = now + ttl / 3;
      } else {
        next_keepalive = now + 200ms;
        // Without a keepalive for a whole TTL the lease may be gone: stop acting on the role.
        if (SteadyMs() - session_ok_ms >
            std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count()) {
          if (expirer_create_revision.exchange(0) != 0) {
            spdlog::warn("registry: etcd session not renewed for a TTL; no longer expiring");
          }
        }
      }
    }
    if (session != 0 && now >= next_campaign) {
      Campaign();
      next_campaign = now + ttl / 5;
    }
  }
  RevokeSession();
}

// ---------------------------------------------------------------------------------------------

Result<std::string> EtcdStore::Impl::ResolveTarget() const {
  bool any_v6 = false;
  std::vector<std::string> addresses;
  for (const std::string& endpoint : options.endpoints) {
    DROVER_ASSIGN_OR_RETURN(std::string address,
                            options.resolve ? options.resolve(endpoint) : Resolve(endpoint));
    any_v6 = any_v6 || address.front() == '[';
    addresses.push_back(std::move(address));
  }
  std::string target = any_v6 ? "ipv6:" : "ipv4:";
  for (std::size_t i = 0; i < addresses.size(); ++i) target += (i ? "," : "") + addresses[i];
  return target;
}

void EtcdStore::Impl::UseTarget(const std::string& target) const {
  grpc::ChannelArguments args;
  args.SetLoadBalancingPolicyName("round_robin");
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);  // etcd refuses pings more often than 5 s
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
  args.SetMaxReceiveMessageSize(-1);  // a watch batch or a range page can be large
  auto next = std::make_unique<Stubs>();
  next->target = target;
  next->channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  next->kv = pb::KV::NewStub(next->channel);
  next->watch = pb::Watch::NewStub(next->channel);
  next->lease = pb::Lease::NewStub(next->channel);
  stubs.store(next.get());
  all_stubs.push_back(std::move(next));
}

void EtcdStore::Impl::Reresolve() const {
  if (!any_names) return;
  MutexLock lock(resolve_mu);
  const MonoTime now = MonoClock::now();
  if (now - resolved_at < 1s) return;
  resolved_at = now;
  auto target = ResolveTarget();
  if (!target.ok()) {
    spdlog::warn("registry: etcd endpoints do not resolve now ({}); keeping {}",
                 target.status().message(), stubs.load()->target.substr(5));
    return;
  }
  if (*target == stubs.load()->target) return;
  spdlog::info("registry: etcd endpoints resolve to {} now (were {}); connecting there",
               target->substr(5), stubs.load()->target.substr(5));
  UseTarget(*target);
}

EtcdStore::EtcdStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<EtcdStore>> EtcdStore::Open(EtcdOptions options) {
  if (options.endpoints.empty()) return InvalidArgumentError("no etcd endpoints given");
  if (options.prefix.empty() || options.prefix.front() != '/' || options.prefix.back() == '/') {
    return InvalidArgumentError("etcd prefix '" + options.prefix +
                                "' must start with '/' and not end with one");
  }
  if (options.session_ttl < 1s) options.session_ttl = 1s;
  if (options.process_name.empty()) options.process_name = DefaultProcessName();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->instances_prefix = options.prefix + "/instances/";
  impl->tombstones_prefix = options.prefix + "/tombstones/";
  impl->renewals_prefix = options.prefix + "/renewals/";
  impl->expirer_key = options.prefix + "/expirer";
  impl->last_key = options.prefix + "/last";
  impl->degraded_key = options.prefix + "/degraded";
  impl->renewal_key = impl->renewals_prefix + options.process_name;
  for (const std::string& endpoint : options.endpoints) {
    DROVER_ASSIGN_OR_RETURN(const HostPort hp, ParseHostPort(endpoint, "etcd endpoint"));
    impl->any_names = impl->any_names || !hp.is_ip();
  }
  DROVER_ASSIGN_OR_RETURN(const std::string target, impl->ResolveTarget());
  {
    MutexLock lock(impl->resolve_mu);
    impl->UseTarget(target);
  }

  // Reachable at all? (One read, retried within the call timeout.)
  pb::RangeRequest probe;
  probe.set_key(impl->expirer_key);
  pb::RangeResponse probed;
  const grpc::Status s = impl->Retry(
      [&](grpc::ClientContext& ctx) { return impl->kv()->Range(&ctx, probe, &probed); });
  if (!s.ok()) {
    return UnavailableError("etcd at " + impl->target().substr(5) +
                            " did not answer: " + s.error_message());
  }
  if (impl->GrantSession()) impl->Campaign();
  Impl* raw = impl.get();
  impl->keeper_thread = std::thread([raw] {
    NameThisThread("etcd-keeper");
    raw->KeeperLoop();
  });
  spdlog::info("registry: etcd store at {} under {} as {}", impl->target().substr(5),
               options.prefix, options.process_name);
  return std::unique_ptr<EtcdStore>(new EtcdStore(std::move(impl)));
}

EtcdStore::~EtcdStore() {
  impl_->stopping = true;
  {
    MutexLock lock(impl_->stream_mu);
    if (impl_->feed_context != nullptr) impl_->feed_context->TryCancel();
  }
  // Taking each waiter's mutex once after `stopping` is set means a thread that checked it
  // false is already blocked in its wait when the notify comes: the wake-up cannot fall in
  // between (the feed's untimed wait while paused would otherwise never return).
  { MutexLock lock(impl_->feed_mu); }
  { MutexLock lock(impl_->keeper_mu); }
  impl_->feed_cv.NotifyAll();
  impl_->keeper_cv.NotifyAll();
  if (impl_->feed_thread.joinable()) impl_->feed_thread.join();
  if (impl_->keeper_thread.joinable()) impl_->keeper_thread.join();
}

Result<StoreState> EtcdStore::Load() { return impl_->Load(); }

Result<std::uint64_t> EtcdStore::Commit(const std::vector<Write>& writes) {
  return impl_->Txn(writes, false);
}

Result<std::vector<Result<std::uint64_t>>> EtcdStore::CommitBatch(
    const std::vector<std::vector<Write>>& batch) {
  std::vector<Result<std::uint64_t>> results;
  results.reserve(batch.size());
  for (std::size_t from = 0; from < batch.size(); from += kMaxSetsPerTxn) {
    const std::size_t to = std::min(batch.size(), from + kMaxSetsPerTxn);
    Status failed = impl_->TxnOfSets(batch, from, to, results);
    if (failed.ok()) continue;
    // Nothing of this Txn is known to be written: the first one's failure is the call's, a later
    // one's belongs to its own sets (those before it are written).
    if (from == 0) return failed;
    while (results.size() < to) results.emplace_back(failed);
  }
  return results;
}

Result<std::uint64_t> EtcdStore::CommitAsExpirer(const std::vector<Write>& writes) {
  return impl_->Txn(writes, true);
}

Status EtcdStore::PruneTombstones(const std::vector<Tombstone>& expired) {
  // Only tombstones still at the revision that was read: a newer one stays.
  std::uint64_t last = 0;
  for (const Tombstone& t : expired) {
    pb::TxnRequest req;
    pb::Compare* c = req.add_compare();
    c->set_key(impl_->TombstoneKey(t.service, t.id));
    c->set_target(pb::Compare::MOD);
    c->set_result(pb::Compare::EQUAL);
    c->set_mod_revision(static_cast<std::int64_t>(t.revision));
    req.add_success()->mutable_request_delete_range()->set_key(
        impl_->TombstoneKey(t.service, t.id));
    impl_->MarkLast(req);
    DROVER_ASSIGN_OR_RETURN(const pb::TxnResponse resp, impl_->SendTxn(req, "prune tombstone"));
    last = std::max(last, static_cast<std::uint64_t>(resp.header().revision()));
  }
  // Back from here, this process's view no longer has them: a register right after must not
  // trip over a pruned tombstone.
  return WaitDelivered(last, impl_->options.call_timeout);
}

Status EtcdStore::Follow(std::uint64_t revision, StoreListener* listener) {
  if (impl_->feed_thread.joinable()) return FailedPreconditionError("already following");
  impl_->listener = listener;
  {
    MutexLock lock(impl_->feed_mu);
    impl_->delivered = revision;
  }
  Impl* raw = impl_.get();
  impl_->feed_thread = std::thread([raw, revision] {
    NameThisThread("etcd-feed");
    raw->FeedLoop(revision);
  });
  return Status::Ok();
}

Status EtcdStore::WaitDelivered(std::uint64_t revision, Duration timeout) {
  // Only events move `delivered` (etcd 3.4's progress notifications can run ahead of the events
  // they are meant to follow); <prefix>/last makes sure a registry commit is always one.
  MutexLock lock(impl_->feed_mu);
  const auto caught_up = [&]() DROVER_REQUIRES(impl_->feed_mu) {
    return impl_->delivered >= revision;
  };
  if (caught_up()) return Status::Ok();
  CondVar cv;
  const auto waiting = impl_->delivery_waiters.emplace(revision, &cv);
  if (cv.WaitFor(impl_->feed_mu, timeout, caught_up)) return Status::Ok();
  // Not delivered: SetDelivered has not reached it, so it is still listed.
  impl_->delivery_waiters.erase(waiting);
  return DeadlineExceededError("etcd watch has delivered revision " +
                               std::to_string(impl_->delivered) + ", waiting for " +
                               std::to_string(revision));
}

Result<std::uint64_t> EtcdStore::Head() {
  pb::RangeRequest req;
  req.set_key(impl_->last_key);
  pb::RangeResponse resp;
  const grpc::Status s =
      impl_->Retry([&](grpc::ClientContext& ctx) { return impl_->kv()->Range(&ctx, req, &resp); });
  if (!s.ok()) return FromGrpc(s, "range");
  if (resp.kvs_size() == 0) return std::uint64_t{0};
  return static_cast<std::uint64_t>(resp.kvs(0).mod_revision());
}

bool EtcdStore::Expirer() const { return impl_->expirer_create_revision.load() != 0; }

void EtcdStore::ShareRenewals(const std::vector<LeaseRenewal>& renewals) {
  MutexLock lock(impl_->keeper_mu);
  for (const LeaseRenewal& r : renewals) {
    impl_->pending_renewals[{r.service, r.id}] = r.generation;
  }
}

Duration EtcdStore::RenewalDelay() const { return impl_->options.expiry_grace; }

Status EtcdStore::ShareDegraded(const std::vector<std::string>& services) {
  pb::PutRequest req;
  req.set_key(impl_->degraded_key);
  req.set_value(json{{"services", services}}.dump());
  pb::PutResponse resp;
  const grpc::Status s =
      impl_->Retry([&](grpc::ClientContext& ctx) { return impl_->kv()->Put(&ctx, req, &resp); });
  return s.ok() ? Status::Ok() : FromGrpc(s, "sharing self-preservation");
}

const std::string& EtcdStore::process_name() const { return impl_->options.process_name; }

void EtcdStore::PauseFeedForTesting(bool paused) {
  {
    MutexLock lock(impl_->feed_mu);
    impl_->paused = paused;
  }
  if (paused) {
    MutexLock lock(impl_->stream_mu);
    if (impl_->feed_context != nullptr) impl_->feed_context->TryCancel();
  }
  impl_->feed_cv.NotifyAll();
}

// --- Deploys ---------------------------------------------------------------------------------

namespace {

constexpr std::size_t kDeploysKept = 200;  // per service, besides the active one

StoredDeploy DecodeDeploy(const mvccpb::KeyValue& kv, const std::string& id,
                          const std::string& service) {
  StoredDeploy d;
  d.id = id;
  d.service = service;
  d.version = static_cast<std::uint64_t>(kv.version());
  const json value = json::parse(kv.value(), nullptr, /*allow_exceptions=*/false);
  if (value.is_object()) {
    d.record = value.value("record", "");
    d.created_ms = value.value("created_ms", std::int64_t{0});
  }
  return d;
}

}  // namespace

// Range helpers for the deploy keys.
struct DeployKeys {
  EtcdStore::Impl& impl;

  std::string Prefix() const { return impl.options.prefix + "/deploys/"; }
  std::string Key(const std::string& service, const std::string& id) const {
    return Prefix() + service + "/" + id;
  }
  std::string ActiveKey(const std::string& service) const {
    return impl.options.prefix + "/active/" + service;
  }

  // One key's value, or nullopt.
  Result<std::optional<mvccpb::KeyValue>> Get(const std::string& key) {
    pb::RangeRequest req;
    req.set_key(key);
    pb::RangeResponse resp;
    const grpc::Status s =
        impl.Retry([&](grpc::ClientContext& ctx) { return impl.kv()->Range(&ctx, req, &resp); });
    if (!s.ok()) return FromGrpc(s, "range " + key);
    if (resp.kvs_size() == 0) return std::optional<mvccpb::KeyValue>();
    return std::optional<mvccpb::KeyValue>(resp.kvs(0));
  }

  // The keys (without values) under `prefix`.
  Result<std::vector<mvccpb::KeyValue>> Keys(const std::string& prefix) {
    pb::RangeRequest req;
    req.set_key(prefix);
    req.set_range_end(PrefixEnd(prefix));
    req.set_keys_only(true);
    pb::RangeResponse resp;
    const grpc::Status s =
        impl.Retry([&](grpc::ClientContext& ctx) { return impl.kv()->Range(&ctx, req, &resp); });
    if (!s.ok()) return FromGrpc(s, "range " + prefix);
    return std::vector<mvccpb::KeyValue>(resp.kvs().begin(), resp.kvs().end());
  }

  // The service a deploy id is stored under, or "".
  Result<std::string> ServiceOf(const std::string& id) {
    DROVER_ASSIGN_OR_RETURN(auto keys, Keys(Prefix()));
    for (const mvccpb::KeyValue& kv : keys) {
      const std::string& key = kv.key();
      if (key.size() > id.size() && key.ends_with("/" + id)) {
        return key.substr(Prefix().size(), key.size() - Prefix().size() - id.size() - 1);
      }
    }
    return std::string();
  }

  Result<std::optional<StoredDeploy>> Read(const std::string& service, const std::string& id) {
    DROVER_ASSIGN_OR_RETURN(auto kv, Get(Key(service, id)));
    if (!kv) return std::optional<StoredDeploy>();
    StoredDeploy d = DecodeDeploy(*kv, id, service);
    DROVER_ASSIGN_OR_RETURN(auto active, Get(ActiveKey(service)));
    d.active = active && active->value() == id;
    return std::optional<StoredDeploy>(std::move(d));
  }
};

Result<std::optional<StoredDeploy>> EtcdStore::GetDeploy(const std::string& id) {
  DeployKeys keys{*impl_};
  DROVER_ASSIGN_OR_RETURN(const std::string service, keys.ServiceOf(id));
  if (service.empty()) return std::optional<StoredDeploy>();
  return keys.Read(service, id);
}

Result<std::vector<StoredDeploy>> EtcdStore::ListDeploys(const std::string& service,
                                                         std::size_t limit) {
  DeployKeys keys{*impl_};
  DROVER_ASSIGN_OR_RETURN(
      auto all, keys.Keys(service.empty() ? keys.Prefix() : keys.Prefix() + service + "/"));
  // Newest first: by when each was created in etcd.
  std::sort(all.begin(), all.end(), [](const mvccpb::KeyValue& a, const mvccpb::KeyValue& b) {
    return a.create_revision() > b.create_revision();
  });
  std::vector<StoredDeploy> out;
  for (const mvccpb::KeyValue& kv : all) {
    if (out.size() >= limit) break;
    const std::string rest = kv.key().substr(keys.Prefix().size());
    const std::size_t slash = rest.find('/');
    if (slash == std::string::npos) continue;
    DROVER_ASSIGN_OR_RETURN(auto d, keys.Read(rest.substr(0, slash), rest.substr(slash + 1)));
    if (d) out.push_back(std::move(*d));
  }
  return out;
}

Result<std::uint64_t> EtcdStore::PutDeploy(const StoredDeploy& deploy,
                                           std::uint64_t expect_version) {
  DeployKeys keys{*impl_};
  const std::string key = keys.Key(deploy.service, deploy.id);
  const std::string active_key = keys.ActiveKey(deploy.service);
  DROVER_ASSIGN_OR_RETURN(auto stored, keys.Get(key));
  const auto actual = static_cast<std::uint64_t>(stored ? stored->version() : 0);
  if (actual != expect_version) {
    return AbortedError("deploy " + deploy.id + " is at version " + std::to_string(actual) +
                        ", not " + std::to_string(expect_version) + ": someone else wrote it");
  }
  DROVER_ASSIGN_OR_RETURN(auto holder, keys.Get(active_key));
  const std::string held = holder ? holder->value() : "";
  if (deploy.active && !held.empty() && held != deploy.id) {
    return FailedPreconditionError("deploy " + held + " of " + deploy.service +
                                   " is running; one deploy per service at a time");
  }
  const std::int64_t created =
      stored ? DecodeDeploy(*stored, deploy.id, deploy.service).created_ms : deploy.created_ms;
  pb::TxnRequest req;
  pb::Compare* version = req.add_compare();
  version->set_key(key);
  version->set_target(pb::Compare::VERSION);
  version->set_result(pb::Compare::EQUAL);
  version->set_version(static_cast<std::int64_t>(expect_version));
  pb::Compare* marker = req.add_compare();
  marker->set_key(active_key);
  if (held.empty()) {
    marker->set_target(pb::Compare::VERSION);
    marker->set_result(pb::Compare::EQUAL);
    marker->set_version(0);
  } else {
    marker->set_target(pb::Compare::VALUE);
    marker->set_result(pb::Compare::EQUAL);
    marker->set_value(held);
  }
  pb::PutRequest* put = req.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(json{{"record", deploy.record}, {"created_ms", created}}.dump());
  if (deploy.active && held.empty()) {
    pb::PutRequest* take = req.add_success()->mutable_request_put();
    take->set_key(active_key);
    take->set_value(deploy.id);
  } else if (!deploy.active && held == deploy.id) {
    req.add_success()->mutable_request_delete_range()->set_key(active_key);
  }
  DROVER_ASSIGN_OR_RETURN(const pb::TxnResponse resp, impl_->SendTxn(req, "put deploy"));
  if (!resp.succeeded()) {
    return AbortedError("deploy " + deploy.id + " or the running deploy of " + deploy.service +
                        " changed concurrently; read it again");
  }
  if (!stored) {
    // The history stays bounded: beyond the newest kept, finished deploys go.
    DROVER_ASSIGN_OR_RETURN(auto all, keys.Keys(keys.Prefix() + deploy.service + "/"));
    std::sort(all.begin(), all.end(), [](const mvccpb::KeyValue& a, const mvccpb::KeyValue& b) {
      return a.create_revision() > b.create_revision();
    });
    const std::string active = deploy.active ? deploy.id : held;
    for (std::size_t i = kDeploysKept; i < all.size(); ++i) {
      if (all[i].key().ends_with("/" + active) && !active.empty()) continue;
      pb::DeleteRangeRequest del;
      del.set_key(all[i].key());
      pb::DeleteRangeResponse deleted;
      (void)impl_->Retry(
          [&](grpc::ClientContext& ctx) { return impl_->kv()->DeleteRange(&ctx, del, &deleted); });
    }
  }
  return expect_version + 1;
}

}  // namespace drover::registry
