// Runs a shell command line and captures its output, for end-to-end tests of the CLI.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace drover::testing {

struct CommandResult {
  int exit_code = -1;  // -1: did not run or did not exit normally
  std::string out;     // stdout, and stderr interleaved unless dropped
};

inline CommandResult RunCommand(const std::string& command, bool with_stderr = true) {
  CommandResult run;
  FILE* pipe = popen((command + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) run.out.append(buf.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace drover::testing
