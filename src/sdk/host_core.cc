#include "sdk/host_core.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "common/fencing.h"
#include "common/host_port.h"
#include "common/metrics_text.h"
#include "drover/discovery.h"
#include "sdk/registry_channel.h"
#include "sdk/registry_failover.h"
#include "sdk/socket_util.h"

namespace drover::sdk {
namespace {

constexpr Duration kReadyPoll = std::chrono::milliseconds(100);
constexpr Duration kMaxRegisterBackoff = std::chrono::seconds(2);
// Heartbeat retries while the registry does not answer: from this, doubling, up to the
// maximum (the same cap as the registry channel's reconnect backoff), each drawn in [d/2, d].
constexpr Duration kMinHeartbeatRetry = std::chrono::milliseconds(200);
constexpr Duration kMaxHeartbeatRetry = std::chrono::seconds(1);

double Ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string DefaultInstanceId() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, 8, "host");
  return std::string(host) + "-" + std::to_string(::getpid());
}

// A registration refused as fenced is retried above the generation it names, this many times (a
// second refusal means another incarnation of the id is registering at the same time).
constexpr int kMaxFencedRetries = 3;

std::uint64_t WallMs(const Clock& clock) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(clock.SystemNow().time_since_epoch())
          .count());
}

bool Retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

template <typename F>
Status Guarded(F&& f, const std::string& what) {
  try {
    return f();
  } catch (const std::exception& e) {
    return InternalError(what + " threw: " + e.what());
  } catch (...) {
    return InternalError(what + " threw");
  }
}

}  // namespace

Status NormalizeHostOptions(HostOptions& o) {
  if (o.registry.empty()) return InvalidArgumentError("host: no registry address");
  if (o.service.empty()) return InvalidArgumentError("host: no service");
  if (o.instance_id.empty()) o.instance_id = DefaultInstanceId();
  if (o.ttl <= Duration::zero()) return InvalidArgumentError("host: ttl must be positive");
  if (o.heartbeat_interval == Duration::zero()) o.heartbeat_interval = o.ttl / 3;
  if (o.heartbeat_interval <= Duration::zero() || o.heartbeat_interval >= o.ttl) {
    return InvalidArgumentError("host: the heartbeat interval must be positive and below the ttl");
  }
  if (o.call_timeout <= Duration::zero() || o.start_timeout <= Duration::zero()) {
    return InvalidArgumentError("host: call and start timeouts must be positive");
  }
  if (o.propagation_delay < Duration::zero() || o.drain_deadline < Duration::zero()) {
    return InvalidArgumentError("host: propagation delay and drain deadline cannot be negative");
  }
  if (o.propagation_delay + o.drain_deadline > o.grace_period) {
    return InvalidArgumentError(
        "host: propagation delay + drain deadline must fit inside the grace period");
  }
  if (o.weight == 0) return InvalidArgumentError("host: weight must be at least 1");
  if (o.on_session && o.listen_fd < 0) {
    if (Status s = ValidateIpv4Address(o.listen, "host: listen"); !s.ok()) return s;
  }
  if (!o.health.empty()) {
    if (Status s = ValidateIpv4Address(o.health, "host: health"); !s.ok()) return s;
  }
  if (!o.on_session) {
    if (o.listen_fd >= 0) {
      return InvalidArgumentError("host: a handed-over listener needs an on_session handler");
    }
    if (o.advertise.empty()) {
      return InvalidArgumentError(
          "host: without on_session the host has no listener; set the advertised address");
    }
  }
  for (const WarmupHook& h : o.warmup) {
    if (!h.run) return InvalidArgumentError("host: warm-up hook '" + h.name + "' has no function");
  }
  for (const ReadinessCheck& c : o.readiness) {
    if (!c.check) return InvalidArgumentError("host: readiness check '" + c.name + "' is empty");
  }
  return Status::Ok();
}

HostCore::HostCore(HostOptions options, RegistryWriter& writer, Heartbeats& heartbeats,
                   Clock& clock)
    : options_(std::move(options)), writer_(writer), heartbeats_(heartbeats), clock_(clock) {}

HostCore::~HostCore() { Shutdown(); }

Status HostCore::Init() {
  if (options_.health.empty()) return Status::Ok();
  auto health = HealthServer::Start(
      options_.health, [this] { return CheckReadiness(); }, [this] { return Metrics(); });
  if (!health.ok()) return health.status();
  health_ = std::move(*health);
  return Status::Ok();
}

Readiness HostCore::CheckReadiness() const {
  if (draining_.load()) return {false, "draining"};
  if (const std::uint64_t by = superseded_by_.load(); by != 0) {
    return {false, "superseded: generation " + std::to_string(by) + " holds this instance id"};
  }
  switch (phase_.load()) {
    case Phase::kCreated:
      return {false, "starting"};
    case Phase::kWarmingUp: {
      const std::size_t i = warming_hook_.load();
      return {false, "warming up" + (i < options_.warmup.size() ? ": " + options_.warmup[i].name
                                                                : std::string())};
    }
    case Phase::kFailed:
      return {false, "start failed"};
    case Phase::kWarm:
      break;
  }
  for (const ReadinessCheck& c : options_.readiness) {
    const Status s = Guarded([&] { return c.check(); }, "check '" + c.name + "'");
    if (!s.ok()) return {false, "check '" + c.name + "' failing: " + s.message()};
  }
  return {true, ""};
}

Status HostCore::SetAccepting(bool accepting, const std::string& reason) {
  if (full_.exchange(!accepting) == !accepting) return Status::Ok();  // no change
  spdlog::info("host {}/{}: {}{}", options_.service, options_.instance_id,
               accepting ? "has room again" : "full",
               reason.empty() ? std::string() : " (" + reason + ")");
  // The heartbeat thread tells the registry (at once: hastened), as it does for readiness: one
  // writer, the latest answer wins, and the caller -- a session thread -- never waits for the
  // registry nor runs the readiness checks.
  if (const std::uint64_t task = beat_task_.load(); task != 0) {
    heartbeats_.Hasten(task, Duration::zero());
  }
  return Status::Ok();
}

std::string HostCore::Metrics() const {
  // One series per state, 1 for the current one: an alert or a dashboard selects a state without
  // knowing the others.
  const char* state = "ready";
  if (draining_.load()) {
    state = "draining";
  } else {
    switch (phase_.load()) {
      case Phase::kCreated:
        state = "starting";
        break;
      case Phase::kWarmingUp:
        state = "warming_up";
        break;
      case Phase::kFailed:
        state = "failed";
        break;
      case Phase::kWarm:
        state = CheckReadiness().ready ? "ready" : "not_ready";
        break;
    }
  }
  metrics::TextWriter out;
  out.Gauge("drover_host_info", "The instance this host registers", 1,
            {{"service", options_.service},
             {"instance", options_.instance_id},
             {"version", options_.version},
             {"zone", options_.zone}});
  for (const char* s : {"starting", "warming_up", "ready", "not_ready", "draining", "failed"}) {
    out.Gauge("drover_host_state",
              "1 for the host's current life-cycle state (not_ready: warm, but a readiness check "
              "fails or a newer generation holds the instance id)",
              std::string_view(s) == state ? 1 : 0, {{"state", s}});
  }
  out.Gauge("drover_host_generation", "The generation registered; 0 while not registered",
            static_cast<double>(registered_generation_.load()));
  out.Gauge("drover_host_full",
            "1 while the application says it takes no new connections (ServerHost::SetAccepting)",
            full_.load() ? 1 : 0);
  out.Gauge("drover_host_accepting",
            "1 while registered and the registry was told the instance accepts new connections",
            registered_accepting_.load() ? 1 : 0);
  out.Counter("drover_host_heartbeats_total", "Heartbeats that renewed the lease",
              static_cast<double>(heartbeats_ok_.load()));
  out.Counter("drover_host_heartbeat_failures_total", "Heartbeats that failed or threw",
              static_cast<double>(heartbeat_failures_.load()));
  out.Counter("drover_host_reregistrations_total",
              "Registrations again after the registry lost the lease",
              static_cast<double>(reregistrations_.load()));
  if (options_.on_session) {  // without it the application serves, and the host cannot count
    out.Gauge("drover_host_sessions", "Sessions being served now",
              static_cast<double>(sessions_.active()));
    out.Counter("drover_host_sessions_total", "Sessions served (accepted connections)",
                static_cast<double>(sessions_.served()));
  }
  if (!out.status().ok()) {
    spdlog::error("host {}/{}: /metrics: {}", options_.service, options_.instance_id,
                  out.status().ToString());
  }
  return out.Take();
}

std::string HostCore::address() const {
  MutexLock lock(registry_mu_);
  return address_;
}

std::uint64_t HostCore::generation() const {
  MutexLock lock(registry_mu_);
  return registered_ ? key_.generation : 0;
}

std::vector<ShutdownStep> HostCore::shutdown_steps() const {
  MutexLock lock(registry_mu_);
  return steps_;
}

HostStats HostCore::stats() const {
  return HostStats{heartbeats_ok_.load(), heartbeat_failures_.load(), reregistrations_.load(),
                   sessions_.served()};
}

Status HostCore::Start() {
  MutexLock lifecycle(lifecycle_mu_);
  if (phase_.load() != Phase::kCreated) return FailedPreconditionError("host: already started");
  if (stop_.stop_requested()) return CancelledError("host: shut down before start");
  Status s = StartLocked();
  if (!s.ok()) {
    phase_.store(Phase::kFailed);
    if (s.code() == StatusCode::kCancelled) {  // asked to stop: not a failure
      spdlog::info("host {}/{}: start abandoned: {}", options_.service, options_.instance_id,
                   s.message());
    } else {
      spdlog::error("host {}/{}: start failed: {}", options_.service, options_.instance_id,
                    s.ToString());
    }
  }
  return s;
}

Status HostCore::StartLocked() {
  const std::string name = options_.service + "/" + options_.instance_id;
  const std::stop_token stop = stop_.get_token();
  const MonoTime t0 = clock_.Now();

  // 1. Warm-up: nothing listens yet, so nothing can be sent here (a connect is refused).
  DROVER_RETURN_IF_ERROR(WarmUp(name, stop));
  const Duration warmup_took = clock_.Now() - t0;

  // 2. The listener. Connections queue and are served from here on; the registry does not know
  // the instance yet.
  DROVER_ASSIGN_OR_RETURN(const std::string address, OpenListener());
  DROVER_RETURN_IF_ERROR(CheckReachable("address", address));
  if (health_) DROVER_RETURN_IF_ERROR(CheckReachable("health address", HealthAddress(address)));

  // 3. Ready: warm-up done, and every readiness check passes.
  phase_.store(Phase::kWarm);
  const MonoTime deadline = clock_.Now() + options_.start_timeout;
  DROVER_RETURN_IF_ERROR(WaitUntilReady(deadline, stop));

  // 4. Register READY with a new generation, retrying while the registry is unreachable.
  DROVER_RETURN_IF_ERROR(RegisterAtStart(name, address, deadline, stop));

  // 5. Heartbeats, on the shared thread; never while draining.
  heartbeat_task_ = heartbeats_.Add(
      name, options_.heartbeat_interval, [this] { Beat(); }, [this] { return !draining_.load(); });
  beat_task_.store(heartbeat_task_);
  spdlog::info(
      "host {}: serving at {} as generation {}; ready and registered in {:.1f} ms (warm-up "
      "{:.1f} ms)",
      name, address, generation(), Ms(clock_.Now() - t0), Ms(warmup_took));
  return Status::Ok();
}

Status HostCore::WarmUp(const std::string& name, std::stop_token stop) {
  phase_.store(Phase::kWarmingUp);
  for (std::size_t i = 0; i < options_.warmup.size(); ++i) {
    const WarmupHook& hook = options_.warmup[i];
    warming_hook_.store(i);
    const MonoTime t = clock_.Now();
    const Status s = Guarded([&] { return hook.run(stop); }, "warm-up '" + hook.name + "'");
    spdlog::info("host {}: warm-up '{}' took {:.1f} ms", name, hook.name, Ms(clock_.Now() - t));
    if (stop.stop_requested()) return CancelledError("shut down during warm-up");
    if (!s.ok()) return s.WithContext("warm-up '" + hook.name + "'");
  }
  return Status::Ok();
}

std::string HostCore::HealthAddress(const std::string& address) const {
  if (!health_) return "";
  // Gateways probe /ready here; the probe listens where the options said, on the bound port.
  // A probe listening on every interface is reached where the instance is advertised.
  HostPort probe =
      ParseHostPort(options_.health, "health", {.allow_port_zero = true}).value_or(HostPort{});
  if (auto advertised = ParseHostPort(address, "address"); probe.IsWildcard() && advertised.ok()) {
    probe.host = advertised->host;
    probe.kind = advertised->kind;
  }
  return probe.WithPort(health_->port()).ToString();
}

Status HostCore::CheckReachable(std::string_view what, const std::string& address) const {
  if (options_.allow_loopback_address) return Status::Ok();
  return CheckAdvertisable(what, address, options_.registry, options_.registry_ca)
      .WithContext("host");
}

Result<std::string> HostCore::OpenListener() {
  std::string address = options_.advertise;
  if (options_.on_session) {
    Status s = options_.listen_fd >= 0 ? sessions_.Adopt(options_.listen_fd)
                                       : sessions_.Open(options_.listen);
    if (!s.ok()) return s;
    sessions_.Serve(options_.on_session);
    if (address.empty()) address = sessions_.address();
    if (address.rfind("0.0.0.0:", 0) == 0) {
      // Every interface: clients are told this host's routable address.
      const std::string routable = FirstRoutableIpv4();
      if (routable.empty()) {
        return InvalidArgumentError("host: listening on " + address +
                                    " and this host has no non-loopback IPv4 address; set the "
                                    "advertised address clients should use");
      }
      address = routable + address.substr(address.find(':'));
    }
  }
  return address;
}

Status HostCore::WaitUntilReady(MonoTime deadline, std::stop_token stop) {
  // Said at once and every kNotReadyLog while it holds: a host waiting on a dependency says which
  // one and why, rather than nothing until the start timeout.
  constexpr Duration kNotReadyLog = std::chrono::seconds(5);
  const MonoTime began = clock_.Now();
  std::string said;
  MonoTime said_at{};
  for (Readiness r = CheckReadiness(); !r.ready; r = CheckReadiness()) {
    const MonoTime now = clock_.Now();
    if (now >= deadline) {
      return DeadlineExceededError("not ready after the start timeout: " + r.reason);
    }
    if (said.empty() || now - said_at >= kNotReadyLog) {
      spdlog::warn("host {}/{}: not ready after {:.1f} s: {} (waiting up to {:.0f} s)",
                   options_.service, options_.instance_id,
                   std::chrono::duration<double>(now - began).count(), r.reason,
                   std::chrono::duration<double>(deadline - began).count());
      said = r.reason;
      said_at = now;
    }
    if (!clock_.SleepFor(kReadyPoll, stop)) {
      return CancelledError("shut down while not ready (" + r.reason + ")");
    }
  }
  return Status::Ok();
}

Status HostCore::RegisterAtStart(const std::string& name, const std::string& address,
                                 MonoTime deadline, std::stop_token stop) {
  {
    MutexLock lock(registry_mu_);
    key_ = InstanceKey{options_.service, options_.instance_id, options_.generation};
    if (key_.generation == 0) key_.generation = WallMs(clock_);
    address_ = address;
  }
  Duration backoff = std::chrono::milliseconds(100);
  int fenced_retries = 0;
  while (true) {
    Status s;
    {
      MutexLock lock(registry_mu_);
      if (deregistering_) return CancelledError("shut down");
      s = RegisterLocked("start");
    }
    if (s.ok()) return Status::Ok();
    // A generation taken from the wall clock can be below one the registry has already seen for
    // this id: the clock stepped back since an earlier incarnation registered. This host is the
    // newest incarnation, so it registers above the one named in the refusal. A generation given
    // in the options is the caller's to choose and is never changed.
    if (const auto newest = FencedNewestGeneration(s);
        newest && options_.generation == 0 && fenced_retries++ < kMaxFencedRetries) {
      MutexLock lock(registry_mu_);
      const std::uint64_t was = key_.generation;
      key_.generation = std::max(WallMs(clock_), *newest + 1);
      spdlog::warn(
          "host {}: the registry has seen generation {} of this instance id, above this host's "
          "clock-based generation {} (did the wall clock step back?); registering as generation {}",
          name, *newest, was, key_.generation);
      continue;
    }
    if (!Retryable(s) || clock_.Now() + backoff >= deadline) return s.WithContext("register");
    spdlog::warn("host {}: cannot register yet ({}); retrying in {:.0f} ms", name, s.message(),
                 Ms(backoff));
    if (!clock_.SleepFor(backoff, stop)) return CancelledError("shut down");
    backoff = std::min(backoff * 2, kMaxRegisterBackoff);
  }
}

Status HostCore::RegisterLocked(const char* why) {
  Registration r;
  r.key = key_;
  r.address = address_;
  r.ttl = options_.ttl;
  r.weight = options_.weight;
  r.zone = options_.zone;
  r.version = options_.version;
  r.labels = options_.labels;
  if (health_) {
    // The probe port serves /metrics too: Prometheus' discovery through the registry scrapes it.
    const std::string probe = HealthAddress(address_);
    r.labels[std::string(kHealthLabel)] = probe;
    // An application that serves its metrics elsewhere says so with its own label.
    r.labels.try_emplace(std::string(kMetricsLabel), probe);
  }
  r.accepting = CheckReadiness().ready && !full_.load();
  const Status s = writer_.Register(r, options_.call_timeout);
  if (s.ok()) {
    registered_ = true;
    accepting_ = r.accepting;
    PublishRegistrationLocked();
    spdlog::debug("host {}/{}: registered generation {} ({})", key_.service, key_.id,
                  key_.generation, why);
  }
  return s;
}

void HostCore::PublishRegistrationLocked() {
  registered_generation_.store(registered_ ? key_.generation : 0);
  registered_accepting_.store(registered_ && accepting_);
}

void HostCore::Beat() {
  // The last line of defence is the Heartbeats thread; catching here too keeps the count per
  // host and the log line specific.
  try {
    BeatOnce();
  } catch (const std::exception& e) {
    heartbeat_failures_.fetch_add(1);
    spdlog::error("host {}/{}: heartbeat threw: {}", options_.service, options_.instance_id,
                  e.what());
  } catch (...) {
    heartbeat_failures_.fetch_add(1);
    spdlog::error("host {}/{}: heartbeat threw", options_.service, options_.instance_id);
  }
}

void HostCore::BeatOnce() {
  InstanceKey key;
  {
    MutexLock lock(registry_mu_);
    if (!registered_ || deregistering_) return;
    key = key_;
  }
  const std::string name = key.service + "/" + key.id;
  const Status s = writer_.Heartbeat(key, options_.call_timeout);
  if (s.ok()) {
    heartbeats_ok_.fetch_add(1);
    const Readiness r = CheckReadiness();  // application code: outside the lock
    MutexLock lock(registry_mu_);
    if (heartbeat_failing_) {
      spdlog::info("host {}: heartbeats renewed again", name);
      heartbeat_failing_ = false;
    }
    heartbeat_retry_ = Duration::zero();
    const bool want = r.ready && !full_.load();
    if (want != accepting_ && !deregistering_ && key.generation == key_.generation) {
      const Status set = writer_.SetState(key, std::nullopt, want, options_.call_timeout);
      if (set.ok()) {
        accepting_ = want;
        PublishRegistrationLocked();
        if (want) {
          spdlog::info("host {}: ready again; accepting new connections", name);
        } else if (!r.ready) {
          spdlog::warn("host {}: not ready ({}); told the registry to send no new connections",
                       name, r.reason);
        }
      }
    }
    return;
  }
  MutexLock lock(registry_mu_);
  if (deregistering_ || key.generation != key_.generation) return;  // shutdown, or already redone
  if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kAborted) {
    // The registry no longer holds this lease: it expired (the registry was unreachable for a
    // ttl; its tombstone fences the old generation) or another process registered the same id
    // with a newer generation. Only the registry's current answer tells the two apart.
    const Result<std::uint64_t> current =
        writer_.CurrentGeneration(key_.service, key_.id, options_.call_timeout);
    if (!current.ok()) {
      heartbeat_failures_.fetch_add(1);
      spdlog::warn("host {}: heartbeat refused ({}) and the registry cannot be read: {}", name,
                   s.message(), current.status().ToString());
      return;
    }
    if (*current > key_.generation) {
      heartbeat_failures_.fetch_add(1);
      registered_ = false;
      PublishRegistrationLocked();
      superseded_by_.store(*current);
      spdlog::error(
          "host {}: generation {} of this instance id is registered by someone else; this host "
          "(generation {}) stops heartbeats and reports not ready",
          name, *current, key_.generation);
      return;
    }
    if (*current == key_.generation) {  // still there: a refusal we do not understand
      heartbeat_failures_.fetch_add(1);
      spdlog::warn("host {}: heartbeat refused: {}", name, s.ToString());
      return;
    }
    key_.generation = std::max(WallMs(clock_), key_.generation + 1);
    spdlog::warn("host {}: the registry lost the lease ({}); registering again as generation {}",
                 name, s.message(), key_.generation);
    const Status again = RegisterLocked("lease lost");
    if (again.ok()) {
      reregistrations_.fetch_add(1);
      heartbeat_failing_ = false;
      return;
    }
    heartbeat_failures_.fetch_add(1);
    spdlog::warn("host {}: registering again failed: {}", name, again.ToString());
    return;
  }
  heartbeat_failures_.fetch_add(1);
  RetryBeatSoon(name, s);
}

void HostCore::RetryBeatSoon(const std::string& name, const Status& why) {
  // The registry is down, restarting or unreachable: retry on a short capped backoff, so a
  // registry that is back hears from every host within about a second. The jitter keeps a
  // fleet's retries from arriving in step.
  const bool transient = MayWorkElsewhere(why.code());
  const Duration cap = std::min<Duration>(kMaxHeartbeatRetry, options_.heartbeat_interval);
  if (transient) {
    heartbeat_retry_ = std::clamp<Duration>(heartbeat_retry_ * 2, kMinHeartbeatRetry, cap);
    const auto wait = std::chrono::duration_cast<Duration>(
        heartbeat_retry_ * std::uniform_real_distribution<double>(0.5, 1.0)(random_));
    if (const std::uint64_t task = beat_task_.load(); task != 0) heartbeats_.Hasten(task, wait);
  }
  spdlog::debug("host {}: heartbeat failed ({})", name, why.ToString());
  if (!heartbeat_failing_) {
    if (transient) {
      spdlog::warn(
          "host {}: heartbeat failed ({}); retrying within {:.0f} ms until the registry "
          "answers",
          name, why.ToString(), Ms(cap));
    } else {
      spdlog::warn("host {}: heartbeat failed ({}); retrying every {:.0f} ms", name, why.ToString(),
                   Ms(options_.heartbeat_interval));
    }
    heartbeat_failing_ = true;
  }
}

void HostCore::Shutdown() {
  std::call_once(shutdown_once_, [this] { RunShutdown(); });
}

Duration HostCore::GraceLeft(MonoTime grace_end) const {
  return std::max(Duration::zero(), grace_end - clock_.Now());
}

void HostCore::Record(std::vector<ShutdownStep>& steps, std::string name, MonoTime since,
                      std::string detail) {
  const Duration took = clock_.Now() - since;
  spdlog::info("host {}/{}: shutdown: {} took {:.1f} ms{}{}", options_.service,
               options_.instance_id, name, Ms(took), detail.empty() ? "" : " -- ", detail);
  steps.push_back(ShutdownStep{std::move(name), took, std::move(detail)});
}

void HostCore::RunShutdown() {
  const MonoTime t0 = clock_.Now();
  const MonoTime grace_end = t0 + options_.grace_period;
  // /ready turns 503 now, and Start() (if running) stops at its next step.
  draining_.store(true);
  stop_.request_stop();
  MutexLock lifecycle(lifecycle_mu_);
  std::vector<ShutdownStep> steps;

  const bool was_registered = LeaveDiscovery(steps, grace_end);
  AwaitPropagation(steps, grace_end, was_registered);
  StopAccepting(steps);
  DrainSessions(steps, grace_end);
  StopTimers(steps);

  const Duration total = clock_.Now() - t0;
  if (total > options_.grace_period) {
    spdlog::warn("host {}/{}: shutdown took {:.1f} ms, past the grace period of {:.1f} ms",
                 options_.service, options_.instance_id, Ms(total), Ms(options_.grace_period));
  } else {
    spdlog::info("host {}/{}: shutdown complete in {:.1f} ms", options_.service,
                 options_.instance_id, Ms(total));
  }
  MutexLock lock(registry_mu_);
  steps_ = std::move(steps);
}

bool HostCore::LeaveDiscovery(std::vector<ShutdownStep>& steps, MonoTime grace_end) {
  // 1. Leave discovery while still serving: DRAINING (clients stop picking us), then deregister
  // with our generation (a newer incarnation of the same id is never removed by us).
  const MonoTime t = clock_.Now();
  bool was_registered = false;
  std::string detail;
  {
    MutexLock lock(registry_mu_);
    deregistering_ = true;
    was_registered = registered_;
    if (registered_) {
      const Duration timeout = std::min(options_.call_timeout, GraceLeft(grace_end));
      const Status drained = writer_.SetState(key_, InstancePhase::kDraining, false, timeout);
      const Status gone = writer_.Deregister(key_, timeout);
      registered_ = false;
      PublishRegistrationLocked();
      detail = "generation " + std::to_string(key_.generation);
      if (!drained.ok()) detail += "; DRAINING failed: " + drained.ToString();
      if (!gone.ok()) detail += "; deregister failed: " + gone.ToString();
    } else {
      detail = "was not registered";
    }
  }
  Record(steps, "deregister", t, std::move(detail));
  return was_registered;
}

void HostCore::AwaitPropagation(std::vector<ShutdownStep>& steps, MonoTime grace_end,
                                bool was_registered) {
  // 2. Let watchers (gateways, clients) learn it before the port closes.
  const MonoTime t = clock_.Now();
  if (was_registered) {
    clock_.SleepFor(std::min(options_.propagation_delay, GraceLeft(grace_end)), std::stop_token{});
  }
  Record(steps, "propagation", t, was_registered ? "" : "skipped");
}

void HostCore::StopAccepting(std::vector<ShutdownStep>& steps) {
  // 3. Stop accepting: connects are refused from here on.
  const MonoTime t = clock_.Now();
  if (options_.on_session) {
    sessions_.StopAccepting();
  } else if (options_.stop_accepting) {
    const Status s = Guarded(
        [&] {
          options_.stop_accepting();
          return Status::Ok();
        },
        "stop_accepting");
    if (!s.ok())
      spdlog::error("host {}/{}: {}", options_.service, options_.instance_id, s.message());
  }
  Record(steps, "stop-accepting", t, "");
}

void HostCore::DrainSessions(std::vector<ShutdownStep>& steps, MonoTime grace_end) {
  // 4. Sessions get until the drain deadline (inside the grace period), then are cut.
  const MonoTime t = clock_.Now();
  const Duration budget = std::min(options_.drain_deadline, GraceLeft(grace_end));
  std::string detail;
  if (options_.on_session) {
    const DrainResult r = sessions_.Drain(budget);
    detail = std::to_string(r.finished) + " finished, " + std::to_string(r.cut) + " cut";
  } else if (options_.drain) {
    const Status s = Guarded(
        [&] {
          options_.drain(budget);
          return Status::Ok();
        },
        "drain");
    if (!s.ok()) detail = s.message();
  }
  Record(steps, "drain", t, std::move(detail));
}

void HostCore::StopTimers(std::vector<ShutdownStep>& steps) {
  // 5. Timers and probes: a heartbeat in flight is cancelled, not waited for.
  const MonoTime t = clock_.Now();
  writer_.Cancel();
  beat_task_.store(0);
  if (heartbeat_task_ != 0) heartbeats_.Remove(heartbeat_task_);
  if (health_) health_->Stop();
  Record(steps, "stop-timers", t, "");
}

}  // namespace drover::sdk
