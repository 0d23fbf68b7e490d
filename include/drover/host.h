// ServerHost: the life cycle of one server instance in the fleet (seed 000; SDK-1 ... SDK-4).
//
// Start() runs, in this order and never another:
//   warm-up hooks -> open the listener -> ready (readiness checks pass) -> register READY with a
//   new generation -> heartbeats.
// An instance is never in the registry before it can serve; an open port is not readiness.
// Shutdown() (SIGTERM through the helpers below, or the destructor) runs, once:
//   DRAINING + deregister -> wait the propagation delay (gateways and clients catch up) ->
//   stop accepting -> drain sessions up to the drain deadline -> stop heartbeats and probes.
// Each step is logged with its duration and the whole stays inside the grace period.
//
// /live and /ready are served on a small HTTP port (Kubernetes probes): /live is 200 while the
// process runs; /ready is 200 only when warm-up is done, every readiness check passes and the
// host is not draining, else 503 naming why. The same port serves /metrics (Prometheus text: the
// host's life-cycle state, registered generation, heartbeats and sessions). The probe address is
// registered as the labels `drover.health`, so gateways can check /ready themselves, and
// `drover.metrics`, the target the registry's Prometheus discovery (GET /v1/prometheus/sd)
// offers for the instance. A readiness check that starts failing after Start marks the instance
// not accepting in the registry (gateways stop sending new connections) without letting its lease
// lapse; when the check passes again, it accepts again.
//
// Heartbeats of every host in a process run on one thread owned by a HostRuntime; a heartbeat
// never throws out of it, and stopping wakes it at once. If the registry has lost the lease
// (it expired while the registry was unreachable), the host registers again with a higher
// generation, unless it is draining.
//
// Thread-safety: Start() once, from one thread; Shutdown() from any threads, any number of
// times (callers return when shutdown is complete); getters from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover {

// One client connection of a ServerHost, served by the application's handler on the session's
// own thread. The host closes the descriptor after the handler returns.
class Session {
 public:
  Session(int fd, std::string peer, const std::atomic<bool>& draining)
      : fd_(fd), peer_(std::move(peer)), draining_(&draining) {}

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }  // "ip:port" of the client
  // True once the host drains: the instance has left discovery. The session may go on until
  // the client leaves or the drain deadline shuts its socket down (reads then fail).
  bool draining() const { return draining_->load(std::memory_order_relaxed); }

 private:
  int fd_;
  std::string peer_;
  const std::atomic<bool>* draining_;
};

struct WarmupHook {
  std::string name;  // for logs and /ready ("warming up: <name>")
  // Loads what the server needs before it can take traffic. Should return early (any status)
  // when `stop` is requested: a shutdown during warm-up does not wait for a full warm-up.
  std::function<Status(std::stop_token stop)> run;
};

struct ReadinessCheck {
  std::string name;               // named in /ready's 503 body and in the logs
  std::function<Status()> check;  // quick and thread-safe; called for every probe and heartbeat
};

struct HostOptions {
  // Who: the registry, the bearer token if it wants one, the service. The registry is
  // host:port, grpc://host:port or grpcs://host:port (TLS); `registry_ca` (PEM) is the CA its
  // certificate is checked against, and implies TLS (default: the system's trust store).
  // Several registries of one cluster are comma-separated ("10.0.0.1:7071,10.0.0.2:7071"): a
  // call that finds one down or too slow is retried on the next within `call_timeout`, with the
  // same generation, so a registry's death costs no heartbeat.
  std::string registry;
  std::string registry_ca;
  std::string token;
  std::string service;
  std::string instance_id;  // empty: <hostname>-<pid>
  // 0: wall-clock milliseconds at Start (grows across restarts); if the registry has seen a
  // newer generation of this id (the clock stepped back), one above that instead.
  std::uint64_t generation = 0;
  std::string version;
  std::string zone;
  std::uint32_t weight = 1;
  std::map<std::string, std::string> labels;

  // What it serves. With `on_session`, the host listens on `listen` (IPv4 host:port; port 0:
  // any free port) or adopts `listen_fd` (a bound, listening socket the application hands
  // over) and runs `on_session` on a thread per connection. A thread whose session ended serves a
  // later one (threads are reused, not made per connection): thread-local state outlives a
  // session.
  std::function<void(Session&)> on_session;
  std::string listen = "127.0.0.1:0";
  int listen_fd = -1;
  // Without `on_session` the application serves by itself (a gRPC server, a worker) and the
  // host calls these during Shutdown, in this order.
  std::function<void()> stop_accepting;
  std::function<void(Duration budget)> drain;  // must return within `budget`
  // The address registered for clients; default: the listener's bound address -- or, listening
  // on 0.0.0.0, the first non-loopback IPv4 address of this host (required without
  // `on_session`).
  std::string advertise;
  // An address (or health probe address) in 127.0.0.0/8, ::1 or "localhost" reaches this machine
  // only, so it is registered only with a registry reached on loopback too: with any other, other
  // machines would dial themselves, and Start() fails FAILED_PRECONDITION saying so. Set this to
  // register one anyway (a tunnel, a sidecar).
  bool allow_loopback_address = false;
  std::string health = "127.0.0.1:0";  // /live, /ready and /metrics; empty: no probe port

  std::vector<WarmupHook> warmup;
  std::vector<ReadinessCheck> readiness;

  Duration ttl = std::chrono::seconds(10);            // the registry lease
  Duration heartbeat_interval{};                      // 0: ttl / 3
  Duration start_timeout = std::chrono::seconds(30);  // readiness + registration during Start
  Duration call_timeout = std::chrono::seconds(2);    // each registry call
  Duration propagation_delay = std::chrono::seconds(2);
  Duration drain_deadline = std::chrono::seconds(20);
  Duration grace_period = std::chrono::seconds(30);  // >= propagation_delay + drain_deadline
};

struct ShutdownStep {
  std::string name;  // deregister, propagation, stop-accepting, drain, stop-timers
  Duration took{};
  std::string detail;  // e.g. "generation 7", "3 finished, 1 cut"
};

struct HostStats {
  std::uint64_t heartbeats = 0;          // renewed leases
  std::uint64_t heartbeat_failures = 0;  // failed or threw (the host keeps running)
  std::uint64_t reregistrations = 0;     // lease lost and registered again
  std::uint64_t sessions = 0;            // connections served
};

// The part shared by every host of a process: one heartbeat thread (SDK-3). Hosts created
// without one get their own. Must outlive nothing: hosts hold a reference.
class HostRuntime {
 public:
  static std::shared_ptr<HostRuntime> Create();
  ~HostRuntime();
  HostRuntime(const HostRuntime&) = delete;
  HostRuntime& operator=(const HostRuntime&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  HostRuntime();
  std::unique_ptr<Impl> impl_;
};

class ServerHost {
 public:
  // Validates the options and starts the probe port (/live 200, /ready 503 "starting").
  static Result<std::unique_ptr<ServerHost>> Create(HostOptions options,
                                                    std::shared_ptr<HostRuntime> runtime = {});
  ~ServerHost();  // Shutdown()
  ServerHost(const ServerHost&) = delete;
  ServerHost& operator=(const ServerHost&) = delete;

  // Warm-up, listen, ready, register, heartbeats (blocks until registered). A failure leaves the
  // instance unregistered; CANCELLED when Shutdown() came first.
  Status Start();
  void Shutdown();

  const std::string& id() const;
  std::string address() const;        // the registered address; empty before Start opens it
  std::uint16_t health_port() const;  // 0 without a probe port
  std::uint64_t generation() const;   // 0 before registration
  std::vector<ShutdownStep> shutdown_steps() const;  // empty until Shutdown() has finished
  HostStats stats() const;

  // Capacity, apart from readiness: false when the server is full (a zone at its player limit)
  // and should get no new connections; true when it has room again. Returns at once; the host's
  // heartbeat thread tells the registry right away (its `accepting`; gateways and discovery
  // clients skip the instance for new connections) while /ready stays 200 and the lease, the
  // sessions and the existing players go on (before registration, registration carries it).
  // `reason` is logged. An operator can do the same by hand (`drover ctl refuse|accept`): the
  // host writes only when its own answer (ready and not full) changes, so an operator's refusal
  // holds until then -- a readiness flap or a SetAccepting call overrides it. Thread-safe; never
  // blocks on the registry, so a session thread may call it.
  Status SetAccepting(bool accepting, const std::string& reason = {});

  struct Impl;

 private:
  explicit ServerHost(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// SIGTERM/SIGINT for hosts: call BlockTerminationSignals() first in main(), before any thread
// starts (threads inherit the mask), then WaitForTerminationSignal() where the process should
// wait, and Shutdown() the hosts when it returns (the signal number).
void BlockTerminationSignals();
int WaitForTerminationSignal();

}  // namespace drover
