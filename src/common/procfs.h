// Reading /proc while the processes in it come and go. A process can end between listing it and
// reading its files, and reading the thread list of one that has ended fails; nothing here
// throws for that: what is gone is simply not listed, or reads as empty.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace drover::procfs {

// The ids of the processes in /proc now (zombies included).
std::vector<int> Pids();

// The thread ids of process `pid`; empty once it is gone.
std::vector<int> Tasks(int pid);

// The open file descriptors of process `pid` (the listing's own among them when `pid` is this
// process); empty once it is gone.
std::vector<int> Fds(int pid);

// The whole of /proc/<pid>/<file>, or of /proc/<pid>/task/<tid>/<file> given `tid`; "" if the
// process (or thread) is gone or the file cannot be read. `file` may name a subpath ("stat").
std::string Read(int pid, std::string_view file, std::optional<int> tid = std::nullopt);

// The fields of /proc/<pid>/stat (or of a thread's, given `tid`) read after the command name
// (which may hold spaces or ')'); nullopt if gone.
struct Stat {
  char state = '?';  // R, S, D, T, Z, ...
  int ppid = 0;
  int pgrp = 0;
};
std::optional<Stat> StatOf(int pid, std::optional<int> tid = std::nullopt);

// The number a line of /proc/<pid>/status (or of a thread's, given `tid`) gives `name`
// ("VmRSS" -> its kB, "nonvoluntary_ctxt_switches"); nullopt if the line is absent or the
// process gone.
std::optional<std::uint64_t> StatusField(int pid, std::string_view name,
                                         std::optional<int> tid = std::nullopt);

// The process's command line with its NUL separators as spaces ("" if gone).
std::string CommandLine(int pid);

// The value of `name` in the process's environment ("" if unset, unreadable or gone).
std::string EnvValue(int pid, std::string_view name);

}  // namespace drover::procfs
