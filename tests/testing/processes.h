// Live processes as /proc shows them, for tests that must prove no process outlived its owner:
// pid, parent, state, command line and the DROVER_INSTANCE_ID an agent gives its instances.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/procfs.h"

namespace drover::testing {

struct ProcessInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';         // R, S, D, T, Z, ... (/proc/<pid>/stat)
  std::string cmdline;      // arguments joined by spaces
  std::string instance_id;  // DROVER_INSTANCE_ID from its environment, "" if none
};

// Every live process (zombies excluded) whose command line contains `marker` (e.g. an address
// only this test uses, so other tests' processes are not counted). Processes that vanish while
// being read are skipped.
inline std::vector<ProcessInfo> ProcessesWith(const std::string& marker) {
  std::vector<ProcessInfo> found;
  for (const int pid : procfs::Pids()) {
    ProcessInfo p;
    p.pid = pid;
    p.cmdline = procfs::CommandLine(pid);
    if (p.cmdline.find(marker) == std::string::npos) continue;
    const auto stat = procfs::StatOf(pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X') continue;  // gone or going
    p.state = stat->state;
    p.ppid = stat->ppid;
    p.instance_id = procfs::EnvValue(pid, "DROVER_INSTANCE_ID");
    found.push_back(std::move(p));
  }
  return found;
}

}  // namespace drover::testing
