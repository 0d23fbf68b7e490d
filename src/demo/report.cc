#include "demo/report.h"

#include <algorithm>
#include <cstdio>

namespace drover::demo {
namespace {

using json = nlohmann::json;

std::string Pad(const std::string& s, std::size_t width) {
  // Widths count bytes; the report is ASCII.
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

}  // namespace

std::string Fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

bool StepReport::ok() const {
  return std::all_of(figures.begin(), figures.end(), [](const Figure& f) { return f.ok; });
}

Window Count(const std::vector<SessionRecord>& records, MonoTime from, MonoTime to) {
  Window w;
  for (const SessionRecord& r : records) {
    if (r.started < from || r.started >= to) continue;
    ++w.sessions;
    switch (r.outcome) {
      case SessionOutcome::kOk:
        ++w.ok;
        break;
      case SessionOutcome::kConnectFailed:
        ++w.connect_failed;
        break;
      case SessionOutcome::kNoWelcome:
        ++w.no_welcome;
        break;
      case SessionOutcome::kBroken:
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

json ReportJson(const std::vector<StepReport>& steps, bool all_ok, double duration_s,
                const Window& players) {
  json report = {{"ok", all_ok},
                 {"duration_s", duration_s},
                 {"players", WindowJson(players)},
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
  return report;
}

}  // namespace drover::demo
