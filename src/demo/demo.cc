#include "demo/demo.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "common/signals.h"
#include "demo/fleet.h"
#include "demo/report.h"
#include "demo/steps.h"
#include "demo/zone_load.h"

namespace drover::demo {
namespace {

// Progress lines go to stderr as they happen; the report goes to stdout.
void Say(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

std::string SelfExe() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// The demo's working directory: the one given, or a new temp dir (removed at the end unless
// asked to keep it). Empty on failure.
struct DataDir {
  std::string path;
  bool remove = false;
};

DataDir MakeDataDir(const DemoOptions& o) {
  if (!o.data_dir.empty()) return {o.data_dir, false};
  std::string tmpl = (std::filesystem::temp_directory_path() / "drover-demo-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::cerr << "drover demo: cannot create a temp dir: " << std::strerror(errno) << "\n";
    return {};
  }
  return {tmpl, !o.keep_data};
}

// One run of the demo against a started fleet: the steps in order, then the report.
class Run {
 public:
  Run(const DemoOptions& options, Fleet& fleet, net::HttpClient registry,
      std::vector<rollout::AgentHost> hosts, Clock& clock, MonoTime began, std::stop_token stop)
      : options_(options),
        fleet_(fleet),
        registry_(std::move(registry)),
        ready_(registry_, {"zone", "whoami", "shard"}),
        clock_(clock),
        stop_(std::move(stop)),
        began_(began),
        ctx_{fleet_, std::move(hosts), registry_, ready_, clock_, stop_} {}

  // Every step, the report, and (unless --exit) the wait for Ctrl-C; the exit code.
  int All() {
    DeployFirstVersion();
    StartPlayers();
    RollingDeploy();
    LibrarySteps();
    CrashingRelease();
    Report();
    Linger();
    Say(Elapsed() +
        "stopping the players, the gateway, the agents (and their instances), the registry ...");
    if (load_) load_->Stop();
    if (stop_.stop_requested() && code_ == 0) code_ = 130;
    return code_;
  }

 private:
  std::string Elapsed() const { return "[" + Fixed(Seconds(clock_.Now() - began_), 1) + " s] "; }

  // Whether to go on: not interrupted, nothing failed, every child still running.
  bool Go() {
    if (code_ != 0 || stop_.stop_requested()) return false;
    if (Status s = fleet_.Check(); !s.ok()) {
      std::cerr << "drover demo: " << s.message() << "\n";
      code_ = 1;
      return false;
    }
    return true;
  }

  void DeployFirstVersion() {
    Say(Elapsed() +
        "deploying zone v1 (3 servers, one per host) through the agents and the health gate ...");
    const rollout::DeployOutcome v1 = DeployZone(ctx_, "v1", 0);
    if (v1.verdict != rollout::Verdict::kPass) {
      std::cerr << "drover demo: the first deploy failed: " << v1.reason << "\n";
      code_ = 1;
    }
  }

  void StartPlayers() {
    if (!Go()) return;
    ZoneLoadOptions lo;
    lo.target = fleet_.zone_address();
    lo.sessions_per_second = options_.rate;
    lo.hold = std::chrono::seconds(1);
    lo.ping_every = std::chrono::milliseconds(300);
    load_ = std::make_unique<ZoneLoad>(lo);
    load_->Start();
    load_from_ = clock_.Now();
    Say(Elapsed() + "players: " + Fixed(options_.rate, 0) +
        " new sessions/s through the gateway, each held 1 s");
    clock_.SleepFor(std::chrono::seconds(2), stop_);
  }

  void RollingDeploy() {
    if (!Go()) return;
    Say(Elapsed() +
        "1/5 rolling deploy of zone v2 under load (surge, gate, old ones leave one by one) ...");
    step1_from_ = clock_.Now();
    v2_ = DeployZone(ctx_, "v2", 0);
    step1_to_ = clock_.Now();
    const bool passed = v2_.verdict == rollout::Verdict::kPass;
    Say(Elapsed() + "    " + (passed ? "passed" : "FAILED: ") + (passed ? "" : v2_.reason));
  }

  // Steps 2 to 4: job results, the router and gRPC.
  void LibrarySteps() {
    if (!Go()) return;
    Say(Elapsed() + "2/5 job results: a compute step fails ...");
    Keep(JobResultsStep(clock_, stop_));
    if (!Go()) return;
    Say(Elapsed() + "3/5 shard scale-out: 4 key-routed servers behind the gateway, then 5 ...");
    Keep(ShardStep(ctx_));
    if (!Go()) return;
    Say(Elapsed() + "4/5 gRPC: 3 WhoAmI servers, then 5 ...");
    Keep(GrpcStep(ctx_));
  }

  void Keep(StepReport step) {
    for (const Figure& fig : step.figures) Say("    " + fig.name + ": " + fig.value);
    steps_.push_back(std::move(step));
  }

  void CrashingRelease() {
    if (!Go()) return;
    Say(Elapsed() + "5/5 a release that crashes 2.5 s after it is READY ...");
    step5_from_ = clock_.Now();
    v3_ = DeployZone(ctx_, "v3", 2.5);
    step5_to_ = clock_.Now();
    for (const std::string& id : ready_.ReadyNow("zone")) {
      if (id.starts_with("zone-v2-")) ++v2_ready_after_;
    }
    Say(Elapsed() + "    " +
        (v3_.verdict == rollout::Verdict::kPass ? "PASSED (wrong)" : "rejected: ") + v3_.reason);
  }

  // The new version's share of new sessions in the slow-start window after its first instance
  // was READY.
  std::optional<double> SlowStartShare(const std::vector<SessionRecord>& records) const {
    std::optional<MonoTime> first_ready;
    for (int n = 1; n <= 3; ++n) {
      if (auto t = ready_.ReadySince("zone-v2-" + std::to_string(n))) {
        first_ready = first_ready ? std::min(*first_ready, *t) : *t;
      }
    }
    if (!first_ready) return std::nullopt;
    const Window w = Count(records, *first_ready, *first_ready + fleet_.options().slow_start);
    int v2_sessions = 0;
    for (const auto& [id, n] : w.by_instance) {
      if (id.starts_with("zone-v2-")) v2_sessions += n;
    }
    if (w.sessions == 0) return std::nullopt;
    return static_cast<double>(v2_sessions) / w.sessions;
  }

  void Report() {
    if (!load_ || code_ != 0 || stop_.stop_requested()) return;
    // Let the last sessions of step 5 end before counting them.
    clock_.SleepFor(std::chrono::milliseconds(2500), stop_);
    const auto records = load_->records();
    steps_.insert(steps_.begin(), ZoneDeployReport(1, "rolling deploy under load", v2_, true,
                                                   Count(records, step1_from_, step1_to_),
                                                   SlowStartShare(records), 0.5, 0));
    steps_.push_back(ZoneDeployReport(5, "crash-looping release", v3_, false,
                                      Count(records, step5_from_, step5_to_), std::nullopt, 0,
                                      v2_ready_after_));
    const Window all = Count(records, load_from_, clock_.Now());
    bool all_ok = true;
    for (const StepReport& s : steps_) all_ok = all_ok && s.ok();
    PrintReport(steps_, ::isatty(STDOUT_FILENO) != 0);
    std::printf(
        "\nplayers over the whole demo: %d sessions, %d refused, %d dropped before WELCOME, "
        "%d cut after it; %.0f s in all. %s\n",
        all.sessions, all.connect_failed, all.no_welcome, all.broken,
        Seconds(clock_.Now() - began_), all_ok ? "Every bound held." : "SOME BOUNDS DID NOT HOLD.");
    std::fflush(stdout);
    if (!all_ok) code_ = 1;
    if (!options_.report.empty()) {
      WriteReport(ReportJson(steps_, all_ok, Seconds(clock_.Now() - began_), all));
    }
  }

  void WriteReport(const nlohmann::json& report) {
    std::ofstream out(options_.report);
    out << report.dump(2) << "\n";
    if (!out) {
      std::cerr << "drover demo: cannot write " << options_.report << "\n";
      code_ = 1;
    } else {
      Say("report written to " + options_.report);
    }
  }

  // Keeps the fleet up for the dashboard until Ctrl-C, unless --exit.
  void Linger() {
    if (options_.exit || stop_.stop_requested() || !fleet_.Check().ok()) return;
    Say("\nStill running: open " + fleet_.registry_url() +
        "/ui/ for the dashboard (players keep playing). Ctrl-C to stop.");
    while (!stop_.stop_requested()) clock_.SleepFor(std::chrono::seconds(1), stop_);
  }

  const DemoOptions& options_;
  Fleet& fleet_;
  net::HttpClient registry_;
  ReadyWatch ready_;
  Clock& clock_;
  const std::stop_token stop_;
  const MonoTime began_;
  Context ctx_;

  int code_ = 0;
  std::unique_ptr<ZoneLoad> load_;
  MonoTime load_from_{}, step1_from_{}, step1_to_{}, step5_from_{}, step5_to_{};
  rollout::DeployOutcome v2_, v3_;
  std::size_t v2_ready_after_ = 0;
  std::vector<StepReport> steps_;
};

// Starts the fleet in `dir`, runs the demo on it, stops it; the exit code.
int RunIn(const DemoOptions& options, const std::string& exe, const std::string& dir,
          std::stop_token stop) {
  RealClock clock;
  const MonoTime began = clock.Now();
  const auto elapsed = [&] { return "[" + Fixed(Seconds(clock.Now() - began), 1) + " s] "; };
  Say("Drover demo: everything on loopback; data and logs in " + dir);
  Say(elapsed() + "starting a registry, three agents (hosts 127.0.0.2-4) and a gateway ...");
  FleetOptions fo;
  fo.exe = exe;
  fo.data_dir = dir;
  fo.ui_port = static_cast<std::uint16_t>(options.ui_port);
  auto fleet = Fleet::Start(fo);
  if (!fleet.ok()) {
    std::cerr << "drover demo: " << fleet.status().message() << "\n";
    return 1;
  }
  Fleet& f = **fleet;
  std::string agents;
  for (const std::string& url : f.agent_urls()) agents += (agents.empty() ? "" : ", ") + url;
  Say(elapsed() + "dashboard: " + f.registry_url() + "/ui/  (registry API " + f.registry_url() +
      ", gateway admin " + f.gateway_admin_url() + ", agents " + agents + ")");
  auto registry = net::HttpClient::Create(f.registry_url(), "", std::chrono::seconds(10));
  std::vector<rollout::AgentClient> clients;
  for (const std::string& url : f.agent_urls()) {
    auto http = net::HttpClient::Create(url, "", std::chrono::seconds(30), {}, "agent");
    if (!http.ok()) break;
    clients.emplace_back(*http);
  }
  if (!registry.ok() || clients.size() != f.agent_urls().size()) {
    std::cerr << "drover demo: cannot reach the fleet\n";
    return 1;
  }
  std::vector<rollout::AgentHost> hosts;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    hosts.push_back({"host " + Fleet::HostAddresses()[i], f.agent_urls()[i], "", 0, &clients[i]});
  }
  const int code = Run(options, f, *registry, std::move(hosts), clock, began, stop).All();
  for (const std::string& line : f.Stop()) spdlog::debug("demo: {}", line);
  return code;
}

}  // namespace

int RunDemo(const DemoOptions& options) {
  if (options.ui_port < 0 || options.ui_port > 65535) {
    std::cerr << "drover demo: --ui-port must be 0..65535\n";
    return 2;
  }
  const std::string exe = SelfExe();
  if (exe.empty()) {
    std::cerr << "drover demo: cannot find this binary (/proc/self/exe)\n";
    return 1;
  }
  // Before any thread: Ctrl-C and SIGTERM are read by the watcher, nowhere else.
  const SignalWatcher signals(
      BlockShutdownSignals(),
      [](int sig) {
        Say(std::string("demo: ") + strsignal(sig) + "; stopping everything (again to force)");
      },
      [](int) {
        Say("demo: forced exit; children get SIGTERM from the kernel");
        std::_Exit(130);
      });
  const DataDir dir = MakeDataDir(options);
  if (dir.path.empty()) return 1;
  // The deploy controller logs every step; the demo's own progress lines say enough.
  if (!options.verbose) spdlog::set_level(spdlog::level::warn);
  const int code = RunIn(options, exe, dir.path, signals.stop_token());
  if (dir.remove) {
    std::error_code ec;
    std::filesystem::remove_all(dir.path, ec);
  } else {
    Say("data and logs kept in " + dir.path);
  }
  return code;
}

}  // namespace drover::demo
