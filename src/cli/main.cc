// `drover`: one binary for every Drover role. Subcommands only parse, wire and run.
#include <absl/synchronization/mutex.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <string_view>

#include "commands.h"
#include "common/allocator.h"
#include "drover/cli.h"
#include "drover/logging.h"

int main(int argc, char** argv) {
  // Debian builds Abseil without NDEBUG, so every absl::Mutex lock (gRPC takes many per call)
  // also updated a process-wide lock-order graph under one global lock: ~3% of the registry's
  // CPU under load (perf: GraphCycles::GetId, RemoveNode). That checking is for debug builds.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{
      "Drover keeps fleets of long-lived backend servers discoverable, balanced and safe to "
      "deploy.",
      "drover"};
  // The allocator too: a memory figure or a profile is read differently on each.
  app.set_version_flag(
      "--version", std::string("drover ") + DROVER_VERSION + " (" + drover::AllocatorName() + ")");
  app.require_subcommand(1);

  drover::logging::LogOptions log_options;
  app.add_option("--log-level", log_options.level,
                 "Log level: trace, debug, info, warn, error, critical, off")
      ->capture_default_str();
  app.add_flag("--log-json", log_options.json, "Write logs as one JSON object per line");
  app.parse_complete_callback([&] {  // after parsing, before any subcommand runs
    if (auto status = drover::logging::Setup(log_options); !status.ok()) {
      throw CLI::ValidationError("--log-level", status.message());
    }
    if (drover::cli::WordsAfterDoubleDash().given && !app.got_subcommand("deploy")) {
      throw CLI::ValidationError("--", "only `drover deploy` takes words after it");
    }
  });

  drover::cli::AddBenchCommands(app);
  drover::cli::AddRegistryCommand(app);
  drover::cli::AddGatewayCommand(app);
  drover::cli::AddCtlCommands(app);
  drover::cli::AddRolloutCommands(app);
  drover::cli::AddDemoCommand(app);
  drover::cli::AddSampleCommands(app);

  // The words after "--" are set aside (commands.h) and the rest parsed.
  int parsed_argc = argc;
  drover::cli::AfterDoubleDash& after = drover::cli::WordsAfterDoubleDash();
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--") continue;
    after.given = true;
    after.words.assign(argv + i + 1, argv + argc);
    parsed_argc = i;
    break;
  }
  return drover::cli::ParseCommandLine(app, parsed_argc, argv).value_or(drover::cli::kExitOk);
}
