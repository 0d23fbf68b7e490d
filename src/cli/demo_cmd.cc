// `drover demo`: one command that shows the whole system working (UX-1). It starts a registry,
// an agent and a gateway on loopback (demo_fleet.h), deploys three zone servers through the
// agent, puts players on them through the gateway, and replays the mission's five incidents
// (demo_steps.h) with a progress line per step; then prints the report table, writes it as JSON
// with --report, and keeps everything running for the dashboard until Ctrl-C (unless --exit).
// Every child is stopped on every way out.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "commands.h"
#include "demo_fleet.h"
#include "demo_steps.h"
#include "gateway/zone_load.h"

namespace drover::cli {
namespace {

using json = nlohmann::json;
using demo::Figure;
using demo::Fixed;
using demo::Seconds;
using demo::StepReport;

struct DemoArgs {
  bool exit = false;
  std::string report;
  std::string data_dir;
  bool keep_data = false;
  int ui_port = 0;
  double rate = 80;
  bool verbose = false;
};

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

// The players' sessions started in [from, to): counted by outcome and by instance.
struct Window {
  int sessions = 0, ok = 0, connect_failed = 0, no_welcome = 0, broken = 0;
  std::map<std::string, int> by_instance;
  int failed() const { return connect_failed + no_welcome; }
};

Window Count(const std::vector<gateway::SessionRecord>& records, MonoTime from, MonoTime to) {
  Window w;
  for (const gateway::SessionRecord& r : records) {
    if (r.started < from || r.started >= to) continue;
    ++w.sessions;
    switch (r.outcome) {
      case gateway::SessionOutcome::kOk:
        ++w.ok;
        break;
      case gateway::SessionOutcome::kConnectFailed:
        ++w.connect_failed;
        break;
      case gateway::SessionOutcome::kNoWelcome:
        ++w.no_welcome;
        break;
      case gateway::SessionOutcome::kBroken:
        ++w.broken;
        break;
    }
    if (!r.instance.empty()) ++w.by_instance[r.instance];
  }
  return w;
}

json WindowJson(const Window& w) {
  return {{"sessions", w.sessions},     {"ok", w.ok},         {"connect_failed", w.connect_failed},
          {"no_welcome", w.no_welcome}, {"broken", w.broken}, {"failed_connections", w.failed()}};
}

std::string Pad(const std::string& s, std::size_t width) {
  // Widths count bytes; the report is ASCII.
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

void PrintReport(const std::vector<StepReport>& steps, bool tty) {
  const char* green = tty ? "\033[32m" : "";
  const char* red = tty ? "\033[31m" : "";
  const char* dim = tty ? "\033[2m" : "";
  const char* reset = tty ? "\033[0m" : "";
  std::printf("\n%s%s%s%s%s\n", Pad("step", 34).c_str(), Pad("figure", 54).c_str(),
              Pad("value", 40).c_str(), Pad("bound", 22).c_str(), "");
  std::printf("%s\n", std::string(154, '-').c_str());
  for (const StepReport& s : steps) {
    bool first = true;
    for (const Figure& f : s.figures) {
      const std::string step = first ? std::to_string(s.number) + " " + s.title : "";
      first = false;
      const char* colour = f.bound.empty() ? dim : (f.ok ? green : red);
      const char* verdict = f.bound.empty() ? "" : (f.ok ? "ok" : "FAIL");
      std::printf("%s%s%s%s%s%s%s\n", Pad(step, 34).c_str(), Pad(f.name, 54).c_str(), colour,
                  Pad(f.value, 40).c_str(), Pad(f.bound, 22).c_str(), verdict, reset);
    }
  }
  std::fflush(stdout);
}

StepReport ZoneDeployReport(int number, const std::string& title, const rollout::DeployOutcome& out,
                            bool should_pass, const Window& w, std::optional<double> new_share,
                            double equal_share, std::size_t old_ready_after) {
  StepReport r{number, title, {}, json::object()};
  const bool passed = out.verdict == rollout::Verdict::kPass;
  r.figures.push_back({"release verdict",
                       std::string(passed ? "PASS" : "FAIL") + " after " +
                           Fixed(Seconds(out.decided_after), 1) + " s",
                       should_pass ? "PASS" : "FAIL", passed == should_pass});
  if (!should_pass) {
    r.figures.push_back({"reason (whole in the report)",
                         out.reason.size() > 38 ? out.reason.substr(0, 35) + "..." : out.reason, "",
                         true});
    r.figures.push_back({"rollback took", Fixed(Seconds(out.rollback_took), 1) + " s", "", true});
    r.figures.push_back({"previous version READY after rollback",
                         std::to_string(old_ready_after) + " of 3", "3 of 3",
                         old_ready_after == 3});
  }
  if (should_pass) {
    r.figures.push_back({"players' failed connections (refused, nobody home)",
                         std::to_string(w.failed()) + " of " + std::to_string(w.sessions), "0",
                         w.failed() == 0 && w.sessions > 0});
    r.figures.push_back({"players' sessions cut", std::to_string(w.broken), "0", w.broken == 0});
  } else {
    // The old version keeps serving, so the gateway always has someone to send a player to:
    // no connection may be refused. A process that aborts takes the sessions it holds with it
    // (before or after its WELCOME), which no deploy system can prevent.
    r.figures.push_back({"players refused",
                         std::to_string(w.connect_failed) + " of " + std::to_string(w.sessions),
                         "0", w.connect_failed == 0 && w.sessions > 0});
    r.figures.push_back({"sessions dropped by the crashing processes",
                         std::to_string(w.no_welcome + w.broken), "", true});
  }
  if (new_share) {
    r.figures.push_back({"new version's share of new sessions, slow start",
                         Fixed(*new_share, 2) + " (equal share " + Fixed(equal_share, 2) + ")",
                         "< " + Fixed(equal_share, 2), *new_share < equal_share});
  }
  r.data = {{"verdict", passed ? "PASS" : "FAIL"},
            {"reason", out.reason},
            {"decided_after_s", Seconds(out.decided_after)},
            {"finished_after_s", Seconds(out.finished_after)},
            {"rollback_s", Seconds(out.rollback_took)},
            {"players", WindowJson(w)}};
  if (new_share) {
    r.data["new_share_slow_start"] = *new_share;
    r.data["equal_share"] = equal_share;
  }
  if (!should_pass) r.data["previous_ready_after"] = old_ready_after;
  return r;
}

int RunDemo(const DemoArgs& args) {
  if (args.ui_port < 0 || args.ui_port > 65535) {
    std::cerr << "drover demo: --ui-port must be 0..65535\n";
    return 2;
  }
  const std::string exe = SelfExe();
  if (exe.empty()) {
    std::cerr << "drover demo: cannot find this binary (/proc/self/exe)\n";
    return 1;
  }
  // Before any thread: Ctrl-C and SIGTERM are read by the watcher below, nowhere else.
  sigset_t signals = BlockShutdownSignals();
  std::stop_source interrupt;
  std::jthread watcher([&](std::stop_token done) {
    timespec tick{0, 100'000'000};
    while (!done.stop_requested()) {
      const int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig <= 0) continue;
      if (!interrupt.stop_requested()) {
        Say(std::string("demo: ") + strsignal(sig) + "; stopping everything (again to force)");
        interrupt.request_stop();
        continue;
      }
      Say("demo: forced exit; children get SIGTERM from the kernel");
      std::_Exit(130);
    }
  });
  const std::stop_token stop = interrupt.get_token();

  std::string dir = args.data_dir;
  bool remove_dir = false;
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "drover-demo-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::cerr << "drover demo: cannot create a temp dir: " << std::strerror(errno) << "\n";
      return 1;
    }
    dir = tmpl;
    remove_dir = !args.keep_data;
  }
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  // The deploy controller logs every step; the demo's own progress lines say enough.
  if (!args.verbose) spdlog::set_level(spdlog::level::warn);
  RealClock clock;
  const MonoTime began = clock.Now();
  auto elapsed = [&] { return "[" + Fixed(Seconds(clock.Now() - began), 1) + " s] "; };

  int code = 0;
  {
    Say("Drover demo: everything on loopback; data and logs in " + dir);
    Say(elapsed() + "starting a registry, an agent and a gateway ...");
    demo::FleetOptions fo;
    fo.exe = exe;
    fo.data_dir = dir;
    fo.ui_port = static_cast<std::uint16_t>(args.ui_port);
    auto fleet = demo::Fleet::Start(fo);
    if (!fleet.ok()) {
      std::cerr << "drover demo: " << fleet.status().message() << "\n";
      return 1;
    }
    demo::Fleet& f = **fleet;
    Say(elapsed() + "dashboard: " + f.registry_url() + "/ui/  (registry API " + f.registry_url() +
        ", gateway admin " + f.gateway_admin_url() + ", agent " + f.agent_url() + ")");
    auto registry = HttpClient::Create(f.registry_url(), "", std::chrono::seconds(10));
    auto agent_http = HttpClient::Create(f.agent_url(), "", std::chrono::seconds(30), {}, "agent");
    if (!registry.ok() || !agent_http.ok()) {
      std::cerr << "drover demo: cannot reach the fleet\n";
      return 1;
    }
    AgentClient agent(*agent_http);
    demo::ReadyWatch ready(*registry, {"zone", "whoami"});
    demo::Context ctx{f, agent, *registry, ready, clock, stop};
    std::vector<StepReport> steps;
    auto check = [&]() -> bool {
      if (stop.stop_requested()) return false;
      if (Status s = f.Check(); !s.ok()) {
        std::cerr << "drover demo: " << s.message() << "\n";
        code = 1;
        return false;
      }
      return true;
    };

    Say(elapsed() + "deploying zone v1 (3 servers) through the agent and the health gate ...");
    const rollout::DeployOutcome v1 = demo::DeployZone(ctx, "v1", 0);
    if (v1.verdict != rollout::Verdict::kPass) {
      std::cerr << "drover demo: the first deploy failed: " << v1.reason << "\n";
      code = 1;
    }
    std::unique_ptr<gateway::ZoneLoad> load;
    MonoTime step1_from{}, step1_to{}, step5_from{}, step5_to{}, load_from{};
    rollout::DeployOutcome v2, v3;
    std::optional<double> v2_share;
    std::size_t v2_ready_after = 0;
    if (code == 0 && check()) {
      gateway::ZoneLoadOptions lo;
      lo.target = f.zone_address();
      lo.sessions_per_second = args.rate;
      lo.hold = std::chrono::seconds(1);
      lo.ping_every = std::chrono::milliseconds(300);
      load = std::make_unique<gateway::ZoneLoad>(lo);
      load->Start();
      load_from = clock.Now();
      Say(elapsed() + "players: " + Fixed(args.rate, 0) +
          " new sessions/s through the gateway, each held 1 s");
      clock.SleepFor(std::chrono::seconds(2), stop);
    }

    if (code == 0 && check()) {
      Say(elapsed() +
          "1/5 rolling deploy of zone v2 under load (surge, gate, old ones leave "
          "one by one) ...");
      step1_from = clock.Now();
      v2 = demo::DeployZone(ctx, "v2", 0);
      step1_to = clock.Now();
      Say(elapsed() + "    " + (v2.verdict == rollout::Verdict::kPass ? "passed" : "FAILED: ") +
          (v2.verdict == rollout::Verdict::kPass ? "" : v2.reason));
    }
    if (code == 0 && check()) {
      Say(elapsed() + "2/5 job results: a compute step fails ...");
      steps.push_back(demo::JobResultsStep(clock, stop));
      for (const Figure& fig : steps.back().figures) Say("    " + fig.name + ": " + fig.value);
    }
    if (code == 0 && check()) {
      Say(elapsed() + "3/5 shard scale-out 4 -> 5 on the router ...");
      steps.push_back(demo::ShardStep());
      for (const Figure& fig : steps.back().figures) Say("    " + fig.name + ": " + fig.value);
    }
    if (code == 0 && check()) {
      Say(elapsed() + "4/5 gRPC: 3 WhoAmI servers, then 5 ...");
      steps.push_back(demo::GrpcStep(ctx));
      for (const Figure& fig : steps.back().figures) Say("    " + fig.name + ": " + fig.value);
    }
    if (code == 0 && check()) {
      Say(elapsed() + "5/5 a release that crashes 2.5 s after it is READY ...");
      step5_from = clock.Now();
      v3 = demo::DeployZone(ctx, "v3", 2.5);
      step5_to = clock.Now();
      v2_ready_after = 0;
      for (const std::string& id : ready.ReadyNow("zone")) {
        if (id.rfind("zone-v2-", 0) == 0) ++v2_ready_after;
      }
      Say(elapsed() + "    " +
          (v3.verdict == rollout::Verdict::kPass ? "PASSED (wrong)" : "rejected: ") + v3.reason);
    }

    if (load && code == 0 && !stop.stop_requested()) {
      // Let the last sessions of step 5 end before counting them.
      clock.SleepFor(std::chrono::milliseconds(2500), stop);
      const auto records = load->records();
      // Slow start: the first 5 s after the first v2 instance was READY.
      std::optional<MonoTime> first_ready;
      for (int n = 1; n <= 3; ++n) {
        if (auto t = ready.ReadySince("zone-v2-" + std::to_string(n))) {
          first_ready = first_ready ? std::min(*first_ready, *t) : *t;
        }
      }
      if (first_ready) {
        const Window w = Count(records, *first_ready, *first_ready + f.options().slow_start);
        int v2_sessions = 0;
        for (const auto& [id, n] : w.by_instance) {
          if (id.rfind("zone-v2-", 0) == 0) v2_sessions += n;
        }
        if (w.sessions > 0) v2_share = static_cast<double>(v2_sessions) / w.sessions;
      }
      steps.insert(steps.begin(),
                   ZoneDeployReport(1, "rolling deploy under load", v2, true,
                                    Count(records, step1_from, step1_to), v2_share, 0.5, 0));
      steps.push_back(ZoneDeployReport(5, "crash-looping release", v3, false,
                                       Count(records, step5_from, step5_to), std::nullopt, 0,
                                       v2_ready_after));
      const Window all = Count(records, load_from, clock.Now());
      bool all_ok = true;
      for (const StepReport& s : steps) all_ok = all_ok && s.ok();
      PrintReport(steps, tty);
      std::printf(
          "\nplayers over the whole demo: %d sessions, %d refused, %d dropped before WELCOME, "
          "%d cut after it; %.0f s in all. %s\n",
          all.sessions, all.connect_failed, all.no_welcome, all.broken,
          Seconds(clock.Now() - began), all_ok ? "Every bound held." : "SOME BOUNDS DID NOT HOLD.");
      std::fflush(stdout);
      if (!all_ok) code = 1;
      if (!args.report.empty()) {
        json report = {{"ok", all_ok},
                       {"duration_s", Seconds(clock.Now() - began)},
                       {"players", WindowJson(all)},
                       {"steps", json::array()}};
        for (const StepReport& s : steps) {
          json rows = json::array();
          for (const Figure& fig : s.figures) {
            rows.push_back(
                {{"figure", fig.name}, {"value", fig.value}, {"bound", fig.bound}, {"ok", fig.ok}});
          }
          report["steps"].push_back({{"number", s.number},
                                     {"title", s.title},
                                     {"ok", s.ok()},
                                     {"figures", s.data},
                                     {"rows", rows}});
        }
        std::ofstream out(args.report);
        out << report.dump(2) << "\n";
        if (!out) {
          std::cerr << "drover demo: cannot write " << args.report << "\n";
          code = 1;
        } else {
          Say("report written to " + args.report);
        }
      }
    }

    if (!args.exit && !stop.stop_requested() && f.Check().ok()) {
      Say("\nStill running: open " + f.registry_url() +
          "/ui/ for the dashboard (players keep playing). Ctrl-C to stop.");
      while (!stop.stop_requested()) clock.SleepFor(std::chrono::seconds(1), stop);
    }
    Say(elapsed() +
        "stopping the players, the gateway, the agent (and its instances), the "
        "registry ...");
    if (load) load->Stop();
    for (const std::string& line : f.Stop()) spdlog::debug("demo: {}", line);
    if (stop.stop_requested() && code == 0) code = 130;
  }
  if (remove_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  } else {
    Say("data and logs kept in " + dir);
  }
  watcher.request_stop();
  return code;
}

}  // namespace

void AddDemoCommand(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run Drover on this machine and replay the five incidents it exists for: a rolling "
      "deploy under load, a failed job, a shard scale-out, gRPC balancing, a crash-looping "
      "release. Starts a registry, an agent, a gateway and sample servers on loopback, prints "
      "a report, then keeps running with the dashboard until Ctrl-C.");
  cmd->add_flag("--exit", args->exit, "Exit after the report instead of waiting for Ctrl-C");
  cmd->add_option("--report", args->report, "Also write the report to this JSON file");
  cmd->add_option("--data-dir", args->data_dir,
                  "Where the registry, agent and logs keep their files (default: a new temp "
                  "dir, removed at exit)");
  cmd->add_flag("--verbose", args->verbose, "Also show the deploy controller's log lines");
  cmd->add_flag("--keep-data", args->keep_data, "Keep the temp dir at exit (logs)");
  cmd->add_option("--ui-port", args->ui_port,
                  "The registry's HTTP port, where the dashboard is (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--rate", args->rate, "New player sessions per second through the gateway")
      ->check(CLI::Range(1.0, 2000.0))
      ->capture_default_str();
  cmd->callback([args] {
    if (const int code = RunDemo(*args); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace drover::cli
