// `drover demo`: the flags of demo/demo.h.
#include <memory>

#include "commands.h"
#include "demo/demo.h"

namespace drover::cli {

void AddDemoCommand(CLI::App& app) {
  auto options = std::make_shared<demo::DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run Drover on this machine and replay the five incidents it exists for: a rolling "
      "deploy under load, a failed job, a shard scale-out, gRPC balancing, a crash-looping "
      "release. Starts a registry, an agent, a gateway and sample servers on loopback, prints "
      "a report, then keeps running with the dashboard until Ctrl-C.");
  cmd->add_flag("--exit", options->exit, "Exit after the report instead of waiting for Ctrl-C");
  cmd->add_option("--report", options->report, "Also write the report to this JSON file");
  cmd->add_option("--data-dir", options->data_dir,
                  "Where the registry, agent and logs keep their files (default: a new temp "
                  "dir, removed at exit)");
  cmd->add_flag("--verbose", options->verbose, "Also show the deploy controller's log lines");
  cmd->add_flag("--keep-data", options->keep_data, "Keep the temp dir at exit (logs)");
  cmd->add_option("--ui-port", options->ui_port,
                  "The registry's HTTP port, where the dashboard is (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--rate", options->rate, "New player sessions per second through the gateway")
      ->check(CLI::Range(1.0, 2000.0))
      ->capture_default_str();
  cmd->callback([options] {
    if (const int code = demo::RunDemo(*options); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace drover::cli
