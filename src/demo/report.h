// The demo's report: each step's figures with their bounds, the players' sessions counted by
// outcome over a time window, and the two ways the report is written (a table on stdout, JSON for
// --report). Plain values and pure functions; thread-compatible.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "demo/zone_load.h"
#include "drover/clock.h"
#include "rollout/deployer.h"

namespace drover::demo {

// One line of the report. An empty bound marks a figure shown for contrast (the incident's
// behaviour), which is never judged.
struct Figure {
  std::string name;
  std::string value;
  std::string bound;
  bool ok = true;
};

struct StepReport {
  int number = 0;
  std::string title;
  std::vector<Figure> figures;
  nlohmann::json data;  // the same figures as numbers, for --report
  bool ok() const;
};

// The players' sessions started in [from, to): counted by outcome and by instance.
struct Window {
  int sessions = 0, ok = 0, connect_failed = 0, no_welcome = 0, broken = 0;
  std::map<std::string, int> by_instance;
  int failed() const { return connect_failed + no_welcome; }
};

Window Count(const std::vector<SessionRecord>& records, MonoTime from, MonoTime to);
nlohmann::json WindowJson(const Window& w);

// A zone deploy's figures: the verdict against `should_pass`, what the players saw during it,
// and (when measured) the new version's share of new sessions during slow start.
StepReport ZoneDeployReport(int number, const std::string& title, const rollout::DeployOutcome& out,
                            bool should_pass, const Window& w, std::optional<double> new_share,
                            double equal_share, std::size_t old_ready_after);

// The table, on stdout; verdicts coloured when `tty`.
void PrintReport(const std::vector<StepReport>& steps, bool tty);

// The whole report as --report writes it.
nlohmann::json ReportJson(const std::vector<StepReport>& steps, bool all_ok, double duration_s,
                          const Window& players);

std::string Fixed(double value, int digits);
double Seconds(Duration d);

}  // namespace drover::demo
