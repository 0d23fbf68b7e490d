// Live processes as /proc shows them, for tests that must prove no process outlived its owner:
// pid, parent, state, command line and the DROVER_INSTANCE_ID an agent gives its instances.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

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
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline_file(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(cmdline_file)),
                        std::istreambuf_iterator<char>());
    if (cmdline.find(marker) == std::string::npos) continue;
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    ProcessInfo p;
    p.pid = static_cast<pid_t>(std::stol(name));
    p.cmdline = std::move(cmdline);
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t paren = line.rfind(')');
    if (paren == std::string::npos || paren + 4 >= line.size()) continue;  // gone meanwhile
    p.state = line[paren + 2];
    try {
      p.ppid = static_cast<pid_t>(std::stol(line.substr(paren + 4)));
    } catch (const std::exception&) {
      continue;
    }
    if (p.state == 'Z' || p.state == 'X') continue;
    std::ifstream environ(entry.path() / "environ");
    std::string var;
    while (std::getline(environ, var, '\0')) {
      if (var.rfind("DROVER_INSTANCE_ID=", 0) == 0) p.instance_id = var.substr(19);
    }
    found.push_back(std::move(p));
  }
  return found;
}

}  // namespace drover::testing
