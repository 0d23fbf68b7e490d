// A bounded soak of the whole system (not run in CI): a registry, an agent and a gateway, each the
// real `drover` binary; N zone servers deployed through the agent with `drover deploy`; players
// opening sessions through the gateway at a steady rate; and a rolling deploy of a new version
// every --deploy-every seconds, for --seconds in all.
//
// Every --sample-every seconds it records each daemon's resident memory (VmRSS) and open file
// descriptors from /proc. At the end it prints, per daemon, the first sample after the first
// deploy (the baseline) against the last one, the ratio of the two, and the least-squares slope
// of RSS over the second half of the run; then the session and deploy counts. A leak shows as a
// ratio above 1 with a positive slope that does not flatten; the run should end with zero failed
// sessions and zero failed deploys. Exit code 1 if any session or deploy failed.
//
//   build/bench/soak --seconds 600            # the 10-minute soak
//   build/bench/soak --seconds 60 --deploy-every 20   # a quick look
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/procfs.h"
#include "drover/cli.h"
#include "testing/child_process.h"
#include "testing/line_client.h"
#include "testing/port_in.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::PortIn;
using Clock = std::chrono::steady_clock;

struct Options {
  int seconds = 600;
  int instances = 10;
  int deploy_every = 60;
  int sample_every = 10;
  double rate = 50;  // sessions per second
  std::string keep_dir;
};

struct Sample {
  double at_s = 0;
  long rss_kb = 0;
  long fds = 0;
};

long RssKb(pid_t pid) {
  const auto kb = drover::procfs::StatusField(pid, "VmRSS");
  return kb ? static_cast<long>(*kb) : -1;
}

// -1 once the process is gone (a daemon always holds some).
long OpenFds(pid_t pid) {
  const std::size_t n = drover::procfs::Fds(pid).size();
  return n == 0 ? -1 : static_cast<long>(n);
}

// Least-squares slope of RSS in MB per minute.
double SlopeMbPerMin(const std::vector<Sample>& samples) {
  if (samples.size() < 2) return 0;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(samples.size());
  for (const Sample& s : samples) {
    const double x = s.at_s / 60.0, y = static_cast<double>(s.rss_kb) / 1024.0;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double d = n * sxx - sx * sx;
  return d == 0 ? 0 : (n * sxy - sx * sy) / d;
}

// Runs argv with stderr appended to `log` (stdout stays piped for the start-up line).
std::unique_ptr<ChildProcess> Spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<std::string> wrapped = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>>'" + log + "'"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return std::make_unique<ChildProcess>(wrapped);
}

// Players: sessions through the gateway at `rate` per second over a few threads, each one
// HELLO -> WELCOME and close.
class Players {
 public:
  Players(std::uint16_t port, double rate) {
    static constexpr int kThreads = 4;
    const auto gap =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kThreads / rate));
    for (int t = 0; t < kThreads; ++t) {
      threads_.emplace_back([this, port, gap, t](std::stop_token stop) {
        auto next = Clock::now() + gap * t / kThreads;
        while (!stop.stop_requested()) {
          std::this_thread::sleep_until(next);
          next += gap;
          drover::testing::LineClient player(port);
          const auto welcome = player.Ask("HELLO soak" + std::to_string(t));
          if (welcome && welcome->rfind("WELCOME ", 0) == 0) {
            ok_.fetch_add(1);
          } else {
            failed_.fetch_add(1);
            std::lock_guard lock(mu_);
            if (first_failure_.empty()) first_failure_ = welcome.value_or("(no answer)");
          }
        }
      });
    }
  }
  void Stop() {
    for (auto& t : threads_) t.request_stop();
    threads_.clear();
  }
  long ok() const { return ok_.load(); }
  long failed() const { return failed_.load(); }
  std::string first_failure() const {
    std::lock_guard lock(mu_);
    return first_failure_;
  }

 private:
  std::atomic<long> ok_{0}, failed_{0};
  mutable std::mutex mu_;
  std::string first_failure_;
  std::vector<std::jthread> threads_;
};

int Run(const Options& o) {
  drover::testing::TempDir tmp;
  const std::string dir = o.keep_dir.empty() ? tmp.path() : o.keep_dir;
  std::filesystem::create_directories(dir);
  std::printf(
      "soak: %d s, %d zone servers, a rolling deploy every %d s, %.0f sessions/s; logs in %s\n",
      o.seconds, o.instances, o.deploy_every, o.rate, dir.c_str());

  auto registry = Spawn({DROVER_BINARY, "registry", "--data-dir", dir + "/registry", "--http",
                         "127.0.0.1:0", "--grpc", "127.0.0.1:0"},
                        dir + "/registry.log");
  const auto reg_line = registry->ReadLine(20s).value_or("");
  const std::uint16_t registry_http = PortIn(reg_line, R"(http://127\.0\.0\.1:(\d+))");
  const std::string grpc =
      "127.0.0.1:" + std::to_string(PortIn(reg_line, R"(grpc://127\.0\.0\.1:(\d+))"));
  auto agent =
      Spawn({DROVER_BINARY, "agent", "--data-dir", dir + "/agent", "--listen", "127.0.0.1:0"},
            dir + "/agent.log");
  const std::uint16_t agent_port =
      PortIn(agent->ReadLine(20s).value_or(""), R"(http://127\.0\.0\.1:(\d+))");
  std::ofstream(dir + "/gateway.yaml")
      << "registry: " << grpc << "\nthreads: 2\nadmin: \"\"\n"
      << "listeners:\n  - name: zone\n    address: 127.0.0.1:0\n    service: zone\n"
      << "    slow_start_ms: 5000\n    health_check_interval_ms: 1000\n    "
         "health_check_timeout_ms: 500\n";
  auto gateway =
      Spawn({DROVER_BINARY, "gateway", "--config", dir + "/gateway.yaml"}, dir + "/gateway.log");
  const std::uint16_t zone_port =
      PortIn(gateway->ReadLine(20s).value_or(""), R"(zone=127\.0\.0\.1:(\d+))");
  if (registry_http == 0 || agent_port == 0 || zone_port == 0) {
    std::fprintf(stderr,
                 "soak: a daemon did not start (registry port %u, agent port %u, gateway port "
                 "%u); see the logs in %s\n",
                 registry_http, agent_port, zone_port, dir.c_str());
    return 2;
  }

  std::atomic<int> deploys_ok{0}, deploys_failed{0};
  auto deploy = [&](int n) {
    const std::string version = "v" + std::to_string(n);
    const std::string cmd =
        std::string(DROVER_BINARY) + " deploy zone --version " + version + " --instances " +
        std::to_string(o.instances) + " --agent http://127.0.0.1:" + std::to_string(agent_port) +
        " --registry http://127.0.0.1:" + std::to_string(registry_http) +
        " --min-healthy-ms 3000 --check-delay-ms 1000 --progress-deadline-ms 120000" +
        " --stop-grace-ms 10000 -- " + DROVER_BINARY + " sample zone --registry " + grpc +
        " --id {id} --listen 127.0.0.1:{port} --health 127.0.0.1:{health_port}" +
        " --version-label {version} --warmup-ms 500 --ttl-ms 3000 --propagation-ms 1000" +
        " --drain-ms 2000 --grace-ms 8000 --log-level warn >> '" + dir + "/deploys.log' 2>&1";
    const auto t0 = Clock::now();
    const auto run = drover::testing::RunCommand(cmd);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    (run.exit_code == 0 ? deploys_ok : deploys_failed)++;
    std::printf("  deploy %-4s %s in %.1f s\n", version.c_str(),
                run.exit_code == 0 ? "passed" : "FAILED", took);
    std::fflush(stdout);
  };

  deploy(1);  // the fleet, before players arrive
  Players players(zone_port, o.rate);
  const std::map<std::string, pid_t> daemons = {
      {"registry", registry->pid()}, {"agent", agent->pid()}, {"gateway", gateway->pid()}};
  std::map<std::string, std::vector<Sample>> samples;
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(o.seconds);
  // Rolling deploys on their own thread, so that sampling goes on during them; one that is
  // under way at the end finishes before the fleet stops.
  std::jthread deployer([&](std::stop_token stop) {
    std::mutex mu;
    std::condition_variable_any cv;
    for (int version = 2;; ++version) {
      std::unique_lock lock(mu);
      if (cv.wait_until(lock, stop, Clock::now() + std::chrono::seconds(o.deploy_every),
                        [] { return false; }) ||
          stop.stop_requested() || Clock::now() >= end) {
        return;
      }
      lock.unlock();
      deploy(version);
    }
  });
  auto next_sample = start;
  std::printf("  %6s %-9s %10s %6s\n", "t s", "process", "rss MB", "fds");
  while (Clock::now() < end) {
    const auto now = Clock::now();
    if (now >= next_sample) {
      const double at = std::chrono::duration<double>(now - start).count();
      for (const auto& [name, pid] : daemons) {
        const Sample s{at, RssKb(pid), OpenFds(pid)};
        samples[name].push_back(s);
        std::printf("  %6.0f %-9s %10.1f %6ld\n", at, name.c_str(),
                    static_cast<double>(s.rss_kb) / 1024.0, s.fds);
      }
      std::fflush(stdout);
      next_sample += std::chrono::seconds(o.sample_every);
    }
    std::this_thread::sleep_until(std::min(next_sample, end));
  }
  deployer.request_stop();
  deployer.join();
  players.Stop();

  std::printf("\n%-9s %12s %12s %8s %10s %10s %22s\n", "process", "rss start MB", "rss end MB",
              "end/start", "fds start", "fds end", "rss slope 2nd half MB/min");
  for (const auto& [name, list] : samples) {
    if (list.size() < 2) continue;
    const Sample& first = list.front();
    const Sample& last = list.back();
    const std::vector<Sample> second_half(list.begin() + static_cast<long>(list.size() / 2),
                                          list.end());
    std::printf("%-9s %12.1f %12.1f %7.2fx %10ld %10ld %22.3f\n", name.c_str(),
                static_cast<double>(first.rss_kb) / 1024.0,
                static_cast<double>(last.rss_kb) / 1024.0,
                static_cast<double>(last.rss_kb) / static_cast<double>(first.rss_kb), first.fds,
                last.fds, SlopeMbPerMin(second_half));
  }
  std::printf("sessions: %ld ok, %ld failed%s%s; deploys: %d passed, %d failed\n", players.ok(),
              players.failed(), players.failed() ? "; first failure: " : "",
              players.failed() ? players.first_failure().c_str() : "", deploys_ok.load(),
              deploys_failed.load());

  // The agent stops its instances in order; then the gateway and the registry.
  for (ChildProcess* p : {agent.get(), gateway.get(), registry.get()}) {
    p->Signal(SIGTERM);
    p->Wait();
  }
  return players.failed() == 0 && deploys_failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Drover soak: registry + agent + gateway + zone servers under steady load with "
      "periodic rolling deploys; reports RSS, file descriptors and errors"};
  Options o;
  app.add_option("--seconds", o.seconds, "How long to run")
      ->check(CLI::Range(10, 86'400))
      ->capture_default_str();
  app.add_option("--instances", o.instances, "Zone servers")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--deploy-every", o.deploy_every, "Seconds between rolling deploys")
      ->check(CLI::Range(5, 86'400))
      ->capture_default_str();
  app.add_option("--sample-every", o.sample_every, "Seconds between RSS/fd samples")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--rate", o.rate, "Player sessions per second")
      ->check(CLI::Range(1.0, 5000.0))
      ->capture_default_str();
  app.add_option("--keep-dir", o.keep_dir, "Keep data and logs here (default: a temp dir)");
  if (const auto code = drover::cli::ParseCommandLine(app, argc, argv)) return *code;
  return Run(o);
}
