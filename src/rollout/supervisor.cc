#include "rollout/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/child_process.h"
#include "common/files.h"
#include "common/host_port.h"
#include "common/procfs.h"
#include "common/text.h"
#include "common/thread_name.h"
#include "drover/mutex.h"
#include "rollout/host_ports.h"
#include "rollout/json_codec.h"

namespace drover::rollout {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string Substitute(const std::string& text, const LaunchSpec& spec) {
  return ReplaceAll(ReplaceAll(ReplaceAll(text, "{id}", spec.id), "{service}", spec.service),
                    "{version}", spec.version);
}

// The value of DROVER_INSTANCE_ID in a live process's environment ("" if unreadable).
std::string InstanceIdOf(int pid) { return procfs::EnvValue(pid, "DROVER_INSTANCE_ID"); }

bool Alive(int pid) { return pid > 0 && ::kill(pid, 0) == 0; }

// SIGKILLs the processes of process group `pgid` that belong to instance `id`.
void KillGroupMembers(int pgid, const std::string& id) {
  for (const int pid : procfs::Pids()) {
    if (::getpgid(pid) == pgid && InstanceIdOf(pid) == id) ::kill(pid, SIGKILL);
  }
}

}  // namespace

struct Managed {
  LaunchSpec spec;
  InstanceStatus status = InstanceStatus::kStarting;
  int pid = 0;
  MonoTime next_start{};
  std::deque<MonoTime> crashes;  // within the restart window
  std::deque<InstanceEvent> events;
  bool stop_requested = false;
  bool term_sent = false;
  MonoTime kill_at{};
  bool gone = false;  // stopped and reaped: Stop() may forget it
};

struct Supervisor::Impl {
  SupervisorOptions options;
  Clock* clock = nullptr;
  Mutex mu;
  CondVar cv;  // wakes the thread; tells Stop() an instance is gone
  std::map<std::string, Managed> instances DROVER_GUARDED_BY(mu);
  bool stopping DROVER_GUARDED_BY(mu) = false;
  std::optional<PortPicker> ports DROVER_GUARDED_BY(mu);
  std::thread thread;
  int lock_fd = -1;  // flock on <data_dir>/lock: one agent per data directory

  ~Impl() {
    if (lock_fd >= 0) ::close(lock_fd);
  }

  std::string StatePath() const { return options.data_dir + "/instances.json"; }
  std::string LogPath(const std::string& id) const {
    return options.data_dir + "/logs/" + id + ".log";
  }

  void Record(Managed& m, EventKind kind, std::string detail) {
    m.events.push_back(InstanceEvent{kind, clock->SystemNow(), std::move(detail)});
    while (m.events.size() > options.event_limit) m.events.pop_front();
  }

  // The desired set and pids, atomically; instances being stopped too, marked, so that a
  // successor finishes stopping them if this agent dies first.
  Status Persist() DROVER_REQUIRES(mu) {
    json list = json::array();
    for (const auto& [id, m] : instances) {
      if (m.gone) continue;
      json entry = {{"spec", LaunchSpecToJson(m.spec)}, {"pid", m.pid}};
      if (m.stop_requested) entry["stopping"] = true;
      list.push_back(std::move(entry));
    }
    Status s = WriteFileAtomically(StatePath(), list.dump() + "\n");
    if (!s.ok()) spdlog::error("agent: {}", s.message());
    return s;
  }

  // The instance's environment: the agent's, less what names another instance, plus who it is
  // and its spec's own variables.
  std::vector<std::string> EnvironmentOf(const LaunchSpec& spec) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      if (entry.starts_with("DROVER_INSTANCE_ID=") || entry.starts_with("DROVER_SERVICE=") ||
          entry.starts_with("DROVER_VERSION=")) {
        continue;
      }
      env.emplace_back(entry);
    }
    env.push_back("DROVER_INSTANCE_ID=" + spec.id);
    env.push_back("DROVER_SERVICE=" + spec.service);
    env.push_back("DROVER_VERSION=" + spec.version);
    for (const auto& [k, v] : spec.env) env.push_back(k + "=" + Substitute(v, spec));
    return env;
  }

  // Starts `m` (common/child_process.h: its own process group, SIGTERM if the agent dies, its
  // log). Runs on the supervisor thread only (the death signal follows this thread).
  void Spawn(Managed& m) DROVER_REQUIRES(mu) {
    const LaunchSpec& spec = m.spec;
    SpawnOptions child;
    for (const std::string& a : spec.argv) child.argv.push_back(Substitute(a, spec));
    child.env = EnvironmentOf(spec);
    child.output = LogPath(spec.id);
    child.what = "instance " + spec.id;
    const Result<pid_t> pid = drover::Spawn(child);
    if (!pid.ok() && pid.status().code() == StatusCode::kFailedPrecondition) {
      // The exec itself was refused for good (the program went away, lost its x bit, is no
      // executable): restarting runs into the same wall, so the agent gives up now and says why.
      // A refusal that may pass (UNAVAILABLE: ETXTBSY, no memory) is a crash like any other.
      Record(m, EventKind::kCrashed, pid.status().message());
      Record(m, EventKind::kGaveUp, pid.status().message());
      m.status = InstanceStatus::kGaveUp;
      spdlog::error("agent: {}: {}; not restarting it", spec.id, pid.status().message());
      return;
    }
    if (!pid.ok()) {
      Crashed(m, pid.status().message());
      return;
    }
    m.pid = *pid;
    m.status = InstanceStatus::kRunning;
    Record(m, EventKind::kStarted, "pid " + std::to_string(*pid));
    spdlog::info("agent: started {} ({} {}) as pid {}", spec.id, spec.service, spec.version, *pid);
    (void)Persist();  // the new pid; logged if not
  }

  // An exit nobody asked for (or a failed start): back off, or give up.
  void Crashed(Managed& m, const std::string& how) DROVER_REQUIRES(mu) {
    const MonoTime now = clock->Now();
    m.crashes.push_back(now);
    while (!m.crashes.empty() && m.crashes.front() + options.restart_window <= now) {
      m.crashes.pop_front();
    }
    const int recent = static_cast<int>(m.crashes.size());
    if (recent > options.max_restarts) {
      Record(m, EventKind::kCrashed, how);
      Record(m, EventKind::kGaveUp,
             "gave up after " + std::to_string(recent) + " crashes within " +
                 std::to_string(
                     std::chrono::duration_cast<std::chrono::seconds>(options.restart_window)
                         .count()) +
                 " s");
      m.status = InstanceStatus::kGaveUp;
      spdlog::error("agent: {} {}; gave up after {} crashes", m.spec.id, how, recent);
      return;
    }
    Duration backoff = options.backoff_initial;
    for (int i = 1; i < recent && backoff < options.backoff_max; ++i) backoff *= 2;
    backoff = std::min(backoff, options.backoff_max);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(backoff).count();
    Record(m, EventKind::kCrashed, how + "; restart in " + std::to_string(ms) + " ms");
    m.status = InstanceStatus::kStarting;
    m.next_start = now + backoff;
    spdlog::warn("agent: {} {}; restart in {} ms", m.spec.id, how, ms);
  }

  void Loop() {
    MutexLock lock(mu);
    while (true) {
      const MonoTime now = clock->Now();
      bool changed = false;
      for (auto& [id, m] : instances) {
        if (m.pid > 0) {
          int status = 0;
          const pid_t r = ::waitpid(m.pid, &status, WNOHANG);
          if (r == m.pid || (r < 0 && errno == ECHILD)) {
            // What the instance started in its process group goes with it: a worker left
            // behind would hold the port the next copy needs, or run twice.
            KillGroupMembers(m.pid, id);
            m.pid = 0;
            changed = true;
            if (m.stop_requested || stopping) {
              Record(m, EventKind::kStopped, DescribeWaitStatus(status));
              spdlog::info("agent: {} stopped ({})", id, DescribeWaitStatus(status));
            } else {
              Crashed(m, DescribeWaitStatus(status));
            }
          }
        }
        if (m.stop_requested) {
          if (m.pid > 0 && !m.term_sent) {
            ::kill(-m.pid, SIGTERM);
            m.term_sent = true;
          } else if (m.pid > 0 && now >= m.kill_at) {
            spdlog::warn("agent: {} did not stop within its grace; killing it", id);
            ::kill(-m.pid, SIGKILL);
            m.kill_at = now + std::chrono::hours(1);
          } else if (m.pid == 0 && !m.gone) {
            m.gone = true;
            changed = true;
          }
          continue;
        }
        if (m.status == InstanceStatus::kStarting && now >= m.next_start && !stopping) Spawn(m);
      }
      if (changed) {
        (void)Persist();  // logged; the next change tries again
        cv.NotifyAll();
      }
      if (stopping) {
        bool all_gone = true;
        for (auto& [id, m] : instances) {
          if (m.pid == 0) continue;
          all_gone = false;
          if (now >= m.kill_at) {
            spdlog::warn("agent: {} did not stop within its grace; killing it", id);
            ::kill(-m.pid, SIGKILL);
            m.kill_at = now + std::chrono::hours(1);
          }
        }
        if (all_gone) return;
      }
      cv.WaitUntil(mu, std::chrono::steady_clock::now() + options.tick);
    }
  }

  // A previous supervisor's processes: wait for them to leave, then kill what is left.
  void SettleLeftovers(const std::vector<std::pair<std::string, int>>& pids) {
    std::vector<std::pair<std::string, int>> ours;
    for (const auto& [id, pid] : pids) {
      if (Alive(pid) && InstanceIdOf(pid) == id) ours.emplace_back(id, pid);
    }
    if (ours.empty()) return;
    spdlog::info("agent: waiting for {} instance(s) of the previous agent to exit", ours.size());
    const auto deadline = std::chrono::steady_clock::now() + options.adopt_wait;
    for (const auto& [id, pid] : ours) {
      ::kill(-pid, SIGTERM);  // PDEATHSIG already did, unless the previous agent is alive
      while (Alive(pid) && InstanceIdOf(pid) == id && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(20ms);
      }
      if (Alive(pid) && InstanceIdOf(pid) == id) {
        spdlog::warn("agent: {} (pid {}) of the previous agent did not exit; killing it", id, pid);
        ::kill(-pid, SIGKILL);
      }
      // Whatever the old copy started and left in its process group goes too.
      KillGroupMembers(pid, id);
    }
  }
};

// ---------------------------------------------------------------------------------------------

Supervisor::Supervisor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Supervisor>> Supervisor::Open(SupervisorOptions options, Clock& clock) {
  if (options.data_dir.empty()) return InvalidArgumentError("the agent needs a data directory");
  if (options.event_limit == 0) return InvalidArgumentError("event_limit must be at least 1");
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir + "/logs", ec);
  if (ec) {
    return UnavailableError("cannot create " + options.data_dir + "/logs: " + ec.message());
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->clock = &clock;
  {
    const auto host = ParseHostPort(impl->options.host + ":1", "host", {.ipv4_only = true});
    MutexLock lock(impl->mu);
    impl->ports.emplace(host.ok() && host->is_ip() ? host->host : "0.0.0.0");
  }
  // Before anything is touched: a second agent on this directory would take the first one's
  // instances for leftovers and stop them.
  const std::string lock_path = impl->options.data_dir + "/lock";
  impl->lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (impl->lock_fd < 0) {
    return UnavailableError("cannot open " + lock_path + ": " + std::strerror(errno));
  }
  if (::flock(impl->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    return FailedPreconditionError("another drover agent is using " + impl->options.data_dir +
                                   " (" + lock_path +
                                   " is locked); stop it or use another --data-dir");
  }

  std::vector<std::pair<std::string, int>> leftovers;
  std::map<std::string, Managed> restored;
  if (std::ifstream in(impl->StatePath()); in) {
    try {
      const json list = json::parse(in);
      for (const json& entry : list) {
        DROVER_ASSIGN_OR_RETURN(LaunchSpec spec, LaunchSpecFromJson(entry.at("spec")));
        leftovers.emplace_back(spec.id, entry.value("pid", 0));
        if (entry.value("stopping", false)) continue;  // settled below, not restarted
        Managed m;
        m.spec = std::move(spec);
        restored.emplace(m.spec.id, std::move(m));
      }
    } catch (const std::exception& e) {
      return DataLossError("cannot read " + impl->StatePath() + ": " + e.what() +
                           " (move it away to start empty)");
    }
  }
  impl->SettleLeftovers(leftovers);
  if (!restored.empty()) {
    spdlog::info("agent: restarting {} instance(s) from {}", restored.size(), impl->StatePath());
  }
  {
    MutexLock lock(impl->mu);
    impl->instances = std::move(restored);
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    NameThisThread("supervisor");
    raw->Loop();
  });
  return std::unique_ptr<Supervisor>(new Supervisor(std::move(impl)));
}

Supervisor::~Supervisor() {
  {
    MutexLock lock(impl_->mu);
    impl_->stopping = true;
    const MonoTime kill_at = impl_->clock->Now() + impl_->options.shutdown_grace;
    for (auto& [id, m] : impl_->instances) {
      if (m.pid > 0) {
        ::kill(-m.pid, SIGTERM);
        m.term_sent = true;
      }
      m.kill_at = kill_at;
    }
  }
  // The loop reaps them, kills what is left past the grace, and returns.
  impl_->cv.NotifyAll();
  impl_->thread.join();
}

Status Supervisor::Start(const LaunchSpec& spec) {
  DROVER_RETURN_IF_ERROR(ValidateLaunchSpec(spec));
  MutexLock lock(impl_->mu);
  if (impl_->stopping) return UnavailableError("the agent is shutting down");
  if (auto it = impl_->instances.find(spec.id); it != impl_->instances.end()) {
    // Stopped and reaped, but the Stop that asked for it gave up waiting: the id is free.
    if (!it->second.gone) {
      return AlreadyExistsError("instance " + spec.id + " already exists");
    }
    impl_->instances.erase(it);
  }
  Managed m;
  m.spec = FillHostPlaceholders(spec, impl_->options.host, *impl_->ports);
  // A program that cannot run is refused now, with the reason, rather than started into a crash
  // loop whose cause only its log file shows.
  DROVER_RETURN_IF_ERROR(CheckRunnable(Substitute(m.spec.argv.front(), m.spec)));
  m.next_start = impl_->clock->Now();
  impl_->instances.emplace(spec.id, std::move(m));
  // Not durable, not started: an agent restarted now would not know it.
  if (Status s = impl_->Persist(); !s.ok()) {
    impl_->instances.erase(spec.id);
    return UnavailableError("cannot record instance " + spec.id + ": " + s.message());
  }
  impl_->cv.NotifyAll();
  return Status::Ok();
}

Status Supervisor::Stop(const std::string& id, Duration grace) {
  MutexLock lock(impl_->mu);
  auto it = impl_->instances.find(id);
  if (it == impl_->instances.end()) return NotFoundError("no instance " + id);
  Managed& m = it->second;
  if (!m.stop_requested) {
    m.stop_requested = true;
    m.status = InstanceStatus::kStopping;
    m.kill_at = impl_->clock->Now() + grace;
    (void)impl_->Persist();  // stopping, even if this process dies now (logged if not)
    impl_->cv.NotifyAll();
  }
  // Bounded: the grace, then SIGKILL, then the reaper's next tick.
  impl_->cv.WaitFor(impl_->mu, grace + 5s, [&]() DROVER_REQUIRES(impl_->mu) {
    auto found = impl_->instances.find(id);
    return found == impl_->instances.end() || found->second.gone;
  });
  it = impl_->instances.find(id);
  if (it == impl_->instances.end()) return Status::Ok();  // a concurrent Stop finished it
  if (!it->second.gone) return DeadlineExceededError(id + " did not stop");
  impl_->instances.erase(it);
  return Status::Ok();
}

Result<std::vector<InstanceInfo>> Supervisor::List(const std::string& service) {
  MutexLock lock(impl_->mu);
  std::vector<InstanceInfo> out;
  for (const auto& [id, m] : impl_->instances) {
    if (!service.empty() && m.spec.service != service) continue;
    InstanceInfo info;
    info.spec = m.spec;
    info.status = m.status;
    info.pid = m.pid;
    info.events.assign(m.events.begin(), m.events.end());
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace drover::rollout
