// Registration of the `drover` subcommands. Each Add* function adds one subcommand to the app
// and stores what it needs to run in state owned by the app's callbacks.
#pragma once

#include <signal.h>

#include <CLI/CLI.hpp>

namespace drover::cli {

// `drover bench ...`: measurement runs that print a report.
void AddBenchCommands(CLI::App& app);

// `drover registry`: the discovery daemon.
void AddRegistryCommand(CLI::App& app);

// `drover gateway`: the TCP gateway.
void AddGatewayCommand(CLI::App& app);

// `drover ctl ...`: list / services / watch / drain / deregister / register against a registry.
void AddCtlCommands(CLI::App& app);

// `drover agent` and `drover deploy` (rollout_cmd.cc).
void AddRolloutCommands(CLI::App& app);

void AddDemoCommand(CLI::App& app);

void AddSampleCommands(CLI::App& app);

// Blocks SIGINT and SIGTERM in the calling thread -- before any thread starts, so that every
// thread inherits the mask and only the caller's sigwait/sigtimedwait receives them -- and
// returns the set.
inline sigset_t BlockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

}  // namespace drover::cli
