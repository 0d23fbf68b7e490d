// `drover demo`: one command that shows the whole system working (UX-1). It starts a registry,
// an agent and a gateway on loopback (fleet.h), deploys three zone servers through the agent,
// puts players on them through the gateway (zone_load.h), and replays the five incidents
// (steps.h; docs/requirements.md) with a progress line per step; then prints the report table
// (report.h), writes it as JSON with --report, and keeps everything running for the dashboard
// until Ctrl-C (unless `exit`). Every child is stopped on every way out; a second Ctrl-C exits
// at once (the children then get SIGTERM from the kernel).
#pragma once

#include <string>

namespace drover::demo {

struct DemoOptions {
  bool exit = false;     // end after the report instead of waiting for Ctrl-C
  std::string report;    // also write the report here, as JSON
  std::string data_dir;  // empty: a new temp dir, removed at exit unless keep_data
  bool keep_data = false;
  int ui_port = 0;       // the registry's HTTP port (the dashboard); 0: any free port
  double rate = 80;      // new player sessions per second
  bool verbose = false;  // also the deploy controller's log lines
};

// Runs the demo on the calling thread (which must be the process's only thread so far: it blocks
// SIGINT and SIGTERM for the watcher). Returns the process exit code: 0 every bound held, 1 a
// bound did not hold or something failed, 2 bad options, 130 interrupted.
int RunDemo(const DemoOptions& options);

}  // namespace drover::demo
