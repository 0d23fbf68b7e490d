// Starting child processes: the one fork/exec of every Drover part that runs other programs (the
// agent's instances, the demo's daemons).
//
// A child started here
//   - is the leader of its own process group, so a terminal's Ctrl-C reaches the parent alone and
//     the parent stops its children in its own order (kill(-pid) reaches a child's children too);
//   - gets `death_signal` from the kernel when the thread that spawned it ends (PR_SET_PDEATHSIG:
//     a parent killed with SIGKILL leaves no orphan behind), and exits at once if the parent died
//     before that was armed;
//   - reads stdin from /dev/null and appends stdout and stderr to `output` (a log file);
//   - inherits no other descriptor of the parent (an inherited socket would keep the parent's
//     peers waiting for an EOF as long as the child lives) and no blocked signal mask;
//   - says on its stderr why, when the program cannot be run, and exits with 127 -- and Spawn
//     returns that reason too (the exec's errno comes back over a close-on-exec pipe), having
//     reaped the child.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include "drover/status.h"

namespace drover {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up in PATH
  // The whole environment ("KEY=VALUE"); nullopt: the parent's.
  std::optional<std::vector<std::string>> env;
  std::string output;  // file that stdout and stderr are appended to (created 0644)
  int death_signal = SIGTERM;
  std::string what = "child";  // names the child in errors and in the exec failure line
};

// Forks and execs as described above. Returns the child's pid (also its process group id) once
// the exec happened -- it waits for that, which takes as long as the kernel's exec (the agent
// spawns under its lock: a program on a hung file system holds the agent up). When the exec
// failed (no child remains): FAILED_PRECONDITION "cannot run <argv[0]>: <why>" for what no retry
// changes (no such file, permission denied, not an executable), UNAVAILABLE with the same text for
// what may pass (ETXTBSY: the binary still open for writing; out of memory or processes).
// UNAVAILABLE also when the log cannot be opened or fork fails. PDEATHSIG follows the calling
// thread: spawn from a thread that lives as long as the children should.
Result<pid_t> Spawn(const SpawnOptions& options);

// Whether `program` -- a path, or a name looked up in this process's PATH as Spawn's exec does --
// is an executable file: OK, or FAILED_PRECONDITION "cannot run <program>: <why>" ("No such file
// or directory", "Permission denied", "not found in PATH (...)"). A check before the fact, for
// an answer at once; Spawn still reports what the exec itself refuses.
Status CheckRunnable(const std::string& program);

// How a wait status ended: "exited with code 1", "killed by signal Segmentation fault".
std::string DescribeWaitStatus(int status);

}  // namespace drover
