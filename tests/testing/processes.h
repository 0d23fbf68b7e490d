// Live processes as /proc shows them, for tests that must prove no process outlived its owner:
// pid, parent, state, command line and the DROVER_INSTANCE_ID an agent gives its instances.
#pragma once

#include <sys/types.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/procfs.h"

namespace drover::testing {

// DROVER_INSTANCE_ID from the environment of process `pid` ("" if none or gone).
inline std::string InstanceIdOf(int pid) {
  std::istringstream environ(procfs::Read(pid, "environ"));
  std::string var;
  while (std::getline(environ, var, '\0')) {
    if (var.rfind("DROVER_INSTANCE_ID=", 0) == 0) return var.substr(19);
  }
  return {};
}

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
    p.instance_id = InstanceIdOf(pid);
    found.push_back(std::move(p));
  }
  return found;
}

}  // namespace drover::testing
