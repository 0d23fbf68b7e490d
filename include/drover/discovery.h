// DiscoveryClient: a watch-driven view of one service in the registry (RT-1, RT-2).
//
// One thread per client follows the registry's gRPC Watch from the last revision it saw whole,
// applies every event to a ServiceView (generation-aware, with the empty-list guard) and
// publishes an immutable snapshot; readers on any thread get values, never pointers into state
// that changes. When the watch breaks, the client keeps serving the last good snapshot
// (stale-if-error), polls List every `list_interval` and reconnects -- to the next registry of
// its list at once, with capped backoff once every one has failed -- resuming from the last
// revision it saw whole (the registry replays what it missed, or sends a RESYNC; the events of a
// revision cut off mid-way come again and are recognised). A failure is never an
// empty list: before the first answer Snapshot() is an error -- the registry's own refusal when it
// gave one (UNAUTHENTICATED for a wrong or expired token), otherwise UNAVAILABLE.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "drover/clock.h"
#include "drover/router.h"
#include "drover/status.h"

namespace drover {

// The registry label where an instance publishes its /ready probe address ("host:port");
// ServerHost sets it, DiscoveryClient copies it into router::Endpoint::health.
inline constexpr std::string_view kHealthLabel = "drover.health";
// The registry label where an instance publishes where Prometheus scrapes its /metrics
// ("host:port"); ServerHost sets it to its probe address, and the registry's Prometheus service
// discovery (GET /v1/prometheus/sd) offers it as the instance's target.
inline constexpr std::string_view kMetricsLabel = "drover.metrics";

// The services the fleet's own parts register in: gateways (address: their admin endpoint) and
// rollout agents (address: their API). The dashboard finds them there.
inline constexpr char kGatewayService[] = "drover-gateway";
inline constexpr char kAgentService[] = "drover-agent";

// The initial-metadata key a registry sends as soon as a gRPC Watch is in place (its value: the
// registry's revision then), so a client knows it is connected before any event arrives.
inline constexpr char kWatchAcceptedHeader[] = "drover-watch-revision";

struct DiscoveryOptions {
  // The registry: host:port, grpc://host:port or grpcs://host:port (TLS). With `registry_ca`
  // (a PEM file) the registry's certificate is checked against it, and TLS is implied; TLS
  // without it checks against the system's trust store. Several registries of one cluster are
  // comma-separated: the client watches one and fails over to the next, resuming from the last
  // revision it saw whole (no gap; replayed events are recognised, not applied twice).
  std::string registry;
  std::string registry_ca;
  std::string service;
  std::string token;                                 // bearer token, if the registry wants one
  Duration list_interval = std::chrono::seconds(5);  // List polling while the watch is down
  // Retries: the next registry at once; once every one has failed, `reconnect_backoff`
  // doubling to `reconnect_backoff_cap`, with jitter.
  Duration reconnect_backoff = std::chrono::milliseconds(200);
  Duration reconnect_backoff_cap = std::chrono::seconds(1);
  // A watch stream silent this long (the registry sends PROGRESS every 5 s when nothing changes)
  // is to a registry that froze or a host that vanished without a reset: it is cancelled and the
  // client moves to the next registry. Zero: never.
  Duration watch_silence_limit = std::chrono::seconds(15);
  double max_drop_fraction = 0.5;  // see ServiceView: bigger drops need a second read
  // Staleness policy (RT-2): a snapshot the registry has not confirmed for longer than this is
  // stale -- Stale() turns true and the client logs it once (and once when the registry is heard
  // again). It keeps serving the snapshot all the same: routing on the last table beats routing
  // on none. What to do about it is the owner's (a gateway reports not-ready on its /ready, so a
  // load balancer in front prefers another gateway). Zero: never stale.
  Duration max_stale = std::chrono::seconds(30);
};

struct DiscoverySnapshot {
  std::shared_ptr<const router::RoutingTable> table;  // version: the registry revision
  // Changes to the members applied so far: the events of one revision arrive one by one, so
  // several tables can carry one version, each holding more of it.
  std::uint64_t changes = 0;
  MonoTime heard_at{};     // when the registry last confirmed it (event, progress or list)
  bool connected = false;  // a watch stream is live
  bool degraded = false;   // the registry reported self-preservation for the service

  // A later table than the one at `revision` holding `changes_then`: a newer revision, or more
  // of it.
  bool NewerThan(std::uint64_t revision, std::uint64_t changes_then) const {
    return table->version() > revision || changes > changes_then;
  }
};

// What the client has done so far, for tests, metrics and logs.
struct DiscoveryStats {
  std::uint64_t events = 0;   // PUT and DELETE events applied from watch streams
  std::uint64_t deletes = 0;  // of which DELETE (an instance left or its lease lapsed)
  std::uint64_t resyncs = 0;  // full snapshots taken from a watch (RESYNC)
  std::uint64_t lists = 0;    // List calls answered
  std::uint64_t watches = 0;  // watch streams the registry accepted
  std::string registry;       // the registry endpoint the client uses now
  bool connected = false;     // a watch stream is live
  // The longest time without a live watch stream, since the first one was accepted; and the
  // current one when disconnected now.
  Duration longest_gap{};
};

class DiscoveryClient {
 public:
  // Starts following `options.service`. The clock must outlive the client.
  static Result<std::unique_ptr<DiscoveryClient>> Start(DiscoveryOptions options, Clock& clock);
  ~DiscoveryClient();  // Stop()

  DiscoveryClient(const DiscoveryClient&) = delete;
  DiscoveryClient& operator=(const DiscoveryClient&) = delete;

  // The last good snapshot; until the registry has answered once, the error of the last attempt
  // (e.g. UNAUTHENTICATED) or UNAVAILABLE. Never blocks on the network. Thread-safe.
  Result<DiscoverySnapshot> Snapshot() const;
  // How long since the registry last confirmed the snapshot (RT-2's staleness metric).
  Duration Age() const;
  // Age() over options.max_stale (with a snapshot, and max_stale not zero).
  bool Stale() const;
  DiscoveryStats Stats() const;
  // Waits (real time) until the snapshot is at `revision` or later (events of that revision may
  // still be arriving). False on timeout.
  bool WaitForRevision(std::uint64_t revision, std::chrono::milliseconds timeout) const;
  // Waits (real time) until the snapshot is past `revision` or has more than `changes` applied:
  // what a follower of every table waits for. False on timeout.
  bool WaitForChange(std::uint64_t revision, std::uint64_t changes,
                     std::chrono::milliseconds timeout) const;
  // Ends the watch and joins the thread. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit DiscoveryClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover
