// A real child process for end-to-end tests: started with fork/exec, stdout captured through a
// pipe, killed (SIGKILL) and reaped by the destructor if still running.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/procfs.h"

namespace drover::testing {

class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      // If the test process dies, the child goes with it instead of lingering on a port.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(out[1], STDOUT_FILENO);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    stdout_ = out[0];
  }
  ~ChildProcess() {
    if (running()) {
      Signal(SIGKILL);
      Wait();
    }
    if (stdout_ >= 0) ::close(stdout_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool running() const { return pid_ > 0 && !exit_status_; }
  pid_t pid() const { return pid_; }
  void Signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // SIGSTOP, then waits (bounded) until the kernel reports the process stopped: kill() returns
  // before every thread has actually stopped, and a test must not race the last ones.
  bool Freeze() const {
    Signal(SIGSTOP);
    for (int i = 0; i < 2000; ++i) {
      const std::vector<int> tasks = procfs::Tasks(pid_);
      bool all_stopped = !tasks.empty();
      for (const int tid : tasks) {
        const auto stat = procfs::StatOf(pid_, tid);
        all_stopped = all_stopped && stat && stat->state == 'T';
      }
      if (all_stopped) return true;
      ::usleep(1000);
    }
    return false;
  }
  // Reaps the child; returns its raw wait status.
  int Wait() {
    if (!exit_status_ && pid_ > 0) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
      exit_status_ = status;
    }
    return exit_status_.value_or(-1);
  }

  // The next line of the child's stdout, or nullopt after `timeout` or at EOF.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const std::size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{stdout_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        return std::nullopt;
      }
      char buf[1024];
      const ssize_t n = ::read(stdout_, buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      buffer_.append(buf, static_cast<std::size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  int stdout_ = -1;
  std::string buffer_;
  std::optional<int> exit_status_;
};

}  // namespace drover::testing
