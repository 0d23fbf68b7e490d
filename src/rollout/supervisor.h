// Supervisor: the local Platform -- runs instances as child processes and keeps them running
// (RO-1). The heart of `drover agent`.
//
// - One thread does everything with processes: forks them (each in its own process group, with
//   PR_SET_PDEATHSIG=SIGTERM tied to that thread, stdout and stderr appended to
//   <data_dir>/logs/<id>.log), reaps them (waitpid, every `tick`), restarts a crashed one after an
//   exponential back-off (backoff_initial doubling to backoff_max), gives up after more than
//   `max_restarts` crashes within `restart_window` (a `gave_up` event; status GAVE_UP), and stops
//   them (SIGTERM to the group, SIGKILL after the grace). Any exit nobody asked for is a crash.
// - Events per instance: a bounded list, the newest `event_limit` (5).
// - Restart of the supervisor itself, without orphans or duplicates: the desired instances and
//   their pids are kept in <data_dir>/instances.json (written atomically on every change). A
//   clean shutdown stops every process but keeps the desired set; if the supervisor is killed,
//   its children get SIGTERM from the kernel (PDEATHSIG) and shut down in order. On start it waits
//   (up to `adopt_wait`) for any process still alive from that file -- matched by pid and its
//   DROVER_INSTANCE_ID -- to exit, kills what remains, and only then starts the desired set
//   again: never two copies of an instance.
//
// Every child gets DROVER_INSTANCE_ID, DROVER_SERVICE and DROVER_VERSION in its environment.
// Start() fills "{host}", "{port}" and "{health_port}" once (host_ports.h); List() shows the
// filled spec, which is also what a restart runs again.
// Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rollout/platform.h"

namespace drover::rollout {

struct SupervisorOptions {
  std::string data_dir;  // required: logs and instances.json live here
  // The address this host is reached at: what "{host}" becomes, and where "{port}" and
  // "{health_port}" are checked to be free (every interface when it is not an IPv4 address).
  std::string host = "127.0.0.1";
  std::size_t event_limit = 5;
  Duration backoff_initial = std::chrono::milliseconds(200);
  Duration backoff_max = std::chrono::seconds(10);
  int max_restarts = 5;
  Duration restart_window = std::chrono::seconds(60);
  Duration tick = std::chrono::milliseconds(20);
  Duration adopt_wait = std::chrono::seconds(10);
  Duration shutdown_grace = std::chrono::seconds(10);  // per instance, at destruction
};

class Supervisor final : public Platform {
 public:
  // Creates the data directory if needed, settles what a previous supervisor left (above) and
  // starts the desired instances. `clock` stamps events; it must outlive the supervisor.
  static Result<std::unique_ptr<Supervisor>> Open(SupervisorOptions options, Clock& clock);
  // Stops every process (each within shutdown_grace, in parallel) and keeps the desired set.
  ~Supervisor() override;

  Status Start(const LaunchSpec& spec) override;
  Status Stop(const std::string& id, Duration grace) override;
  Result<std::vector<InstanceInfo>> List(const std::string& service) override;

  struct Impl;

 private:
  explicit Supervisor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::rollout
