// HostCore: the life-cycle logic behind drover::ServerHost (see include/drover/host.h), written
// against the RegistryWriter seam so that it is tested with the real registry over gRPC and with
// a fake under ThreadSanitizer.
//
// Threads: Start() on the caller's thread; heartbeats on the shared Heartbeats thread; probes on
// the HealthServer thread; sessions on their own threads; Shutdown() on any thread.
// Registration-changing writes (register, re-register, accepting flips, drain + deregister) are
// serialised by `registry_mu_`, so a heartbeat that finds its lease gone can never re-register
// an instance that Shutdown() has just deregistered.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "drover/host.h"
#include "drover/mutex.h"
#include "sdk/health_server.h"
#include "sdk/heartbeats.h"
#include "sdk/registry_writer.h"
#include "sdk/session_server.h"

namespace drover::sdk {

// Fills defaults (instance id, heartbeat interval) and rejects options that cannot work.
Status NormalizeHostOptions(HostOptions& options);

class HostCore {
 public:
  // The writer, heartbeats and clock must outlive the core.
  HostCore(HostOptions options, RegistryWriter& writer, Heartbeats& heartbeats, Clock& clock);
  ~HostCore();  // Shutdown()
  HostCore(const HostCore&) = delete;
  HostCore& operator=(const HostCore&) = delete;

  // Starts the probe port. Called once, before Start().
  Status Init();
  Status Start();
  void Shutdown();

  Readiness CheckReadiness() const;
  // Capacity (see ServerHost::SetAccepting): whether the application takes new connections.
  // Recorded at once; the heartbeat thread, hastened, tells the registry (registration carries
  // it before that). Never changes readiness. Always OK.
  Status SetAccepting(bool accepting, const std::string& reason);
  // The probe port's /metrics: the host's state, registration and counters in the Prometheus
  // text format. Takes no lock a registry call holds, so a scrape never waits for the registry.
  std::string Metrics() const;

  const std::string& id() const { return options_.instance_id; }
  std::string address() const;
  std::uint16_t health_port() const { return health_ ? health_->port() : 0; }
  std::uint64_t generation() const;
  std::vector<ShutdownStep> shutdown_steps() const;
  HostStats stats() const;

 private:
  enum class Phase { kCreated, kWarmingUp, kWarm, kFailed };

  void Beat();      // one heartbeat: renew, follow readiness, re-register a lost lease
  void BeatOnce();  // Beat() without the exception guard
  // After a heartbeat the registry did not answer: the next one sooner than the interval.
  void RetryBeatSoon(const std::string& name, const Status& why) DROVER_REQUIRES(registry_mu_);
  Status RegisterLocked(const char* why) DROVER_REQUIRES(registry_mu_);
  // Copies registered_, key_.generation and accepting_ to what Metrics() reads.
  void PublishRegistrationLocked() DROVER_REQUIRES(registry_mu_);
  Status StartLocked() DROVER_REQUIRES(lifecycle_mu_);
  // The steps of StartLocked(), in order.
  Status WarmUp(const std::string& name, std::stop_token stop) DROVER_REQUIRES(lifecycle_mu_);
  // Returns the address to advertise.
  Result<std::string> OpenListener() DROVER_REQUIRES(lifecycle_mu_);
  // The probe address registered as drover.health and drover.metrics for `address` ("" without
  // a probe port).
  std::string HealthAddress(const std::string& address) const;
  // FAILED_PRECONDITION when `address` is loopback and the registry is not (HostOptions).
  Status CheckReachable(std::string_view what, const std::string& address) const;
  Status WaitUntilReady(MonoTime deadline, std::stop_token stop) DROVER_REQUIRES(lifecycle_mu_);
  Status RegisterAtStart(const std::string& name, const std::string& address, MonoTime deadline,
                         std::stop_token stop) DROVER_REQUIRES(lifecycle_mu_);
  void RunShutdown();
  // The steps of RunShutdown(), in order, each recorded into `steps`. LeaveDiscovery() returns
  // whether the instance was registered.
  bool LeaveDiscovery(std::vector<ShutdownStep>& steps, MonoTime grace_end)
      DROVER_REQUIRES(lifecycle_mu_);
  void AwaitPropagation(std::vector<ShutdownStep>& steps, MonoTime grace_end, bool was_registered)
      DROVER_REQUIRES(lifecycle_mu_);
  void StopAccepting(std::vector<ShutdownStep>& steps) DROVER_REQUIRES(lifecycle_mu_);
  void DrainSessions(std::vector<ShutdownStep>& steps, MonoTime grace_end)
      DROVER_REQUIRES(lifecycle_mu_);
  void StopTimers(std::vector<ShutdownStep>& steps) DROVER_REQUIRES(lifecycle_mu_);
  Duration GraceLeft(MonoTime grace_end) const;
  void Record(std::vector<ShutdownStep>& steps, std::string name, MonoTime since,
              std::string detail);

  HostOptions options_;
  RegistryWriter& writer_;
  Heartbeats& heartbeats_;
  Clock& clock_;

  std::unique_ptr<HealthServer> health_;
  SessionServer sessions_;
  std::stop_source stop_;  // Shutdown() requested: ends warm-up and Start's waits
  std::atomic<Phase> phase_{Phase::kCreated};
  std::atomic<bool> draining_{false};
  std::atomic<bool> full_{false};                // the application said it takes no new connections
  std::atomic<std::size_t> warming_hook_{0};     // index of the running warm-up hook
  std::atomic<std::uint64_t> superseded_by_{0};  // a newer generation holds our id

  Mutex lifecycle_mu_;  // held by Start() and by Shutdown() past its first step
  std::once_flag shutdown_once_;
  std::uint64_t heartbeat_task_ DROVER_GUARDED_BY(lifecycle_mu_) = 0;
  std::atomic<std::uint64_t> beat_task_{0};  // heartbeat_task_, for the beat to hasten itself

  mutable Mutex registry_mu_;
  InstanceKey key_ DROVER_GUARDED_BY(registry_mu_);
  std::string address_ DROVER_GUARDED_BY(registry_mu_);
  bool registered_ DROVER_GUARDED_BY(registry_mu_) = false;
  bool accepting_ DROVER_GUARDED_BY(registry_mu_) = false;      // what the registry was told
  bool deregistering_ DROVER_GUARDED_BY(registry_mu_) = false;  // no (re-)registration from now
  // For one log line per outage.
  bool heartbeat_failing_ DROVER_GUARDED_BY(registry_mu_) = false;
  // While the registry is unreachable, heartbeats are retried after this (jittered, doubling
  // up to kMaxHeartbeatRetry or the interval), so a registry that comes back is told within
  // about a second, not a heartbeat interval later (which can be a third of the lease).
  Duration heartbeat_retry_ DROVER_GUARDED_BY(registry_mu_){};
  std::minstd_rand random_ DROVER_GUARDED_BY(registry_mu_){std::random_device{}()};
  std::vector<ShutdownStep> steps_ DROVER_GUARDED_BY(registry_mu_);

  // For Metrics(): the generation registered (0: none) and whether the registry was told the
  // instance accepts. Copies, because registry_mu_ is held across registry calls and a scrape
  // shares the probe thread with /ready.
  std::atomic<std::uint64_t> registered_generation_{0};
  std::atomic<bool> registered_accepting_{false};
  std::atomic<std::uint64_t> heartbeats_ok_{0};
  std::atomic<std::uint64_t> heartbeat_failures_{0};
  std::atomic<std::uint64_t> reregistrations_{0};
};

}  // namespace drover::sdk
