#include "common/child_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace drover {
namespace {

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// In the child, between fork and exec: only async-signal-safe calls (no allocation).
[[noreturn]] void BecomeChild(pid_t parent, int output, int death_signal, const char* what,
                              char* const* argv, char* const* envp) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, death_signal);
  if (::getppid() != parent) ::_exit(127);  // the parent died before the prctl took hold
  ::dup2(output, STDOUT_FILENO);
  ::dup2(output, STDERR_FILENO);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
  ::close_range(3, ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execvpe(argv[0], argv, envp);
  const char* why = ::strerrordesc_np(errno);
  WriteAll(STDERR_FILENO, "drover: cannot run ");
  WriteAll(STDERR_FILENO, what);
  WriteAll(STDERR_FILENO, " (");
  WriteAll(STDERR_FILENO, argv[0]);
  WriteAll(STDERR_FILENO, "): ");
  WriteAll(STDERR_FILENO, why != nullptr ? why : "unknown error");
  WriteAll(STDERR_FILENO, "\n");
  ::_exit(127);
}

}  // namespace

Result<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return InvalidArgumentError(options.what + ": no program to run");
  std::vector<std::string> argv = options.argv;
  std::vector<std::string> env;
  if (options.env) {
    env = *options.env;
  } else {
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  }
  // Everything the child touches is ready before the fork.
  const std::vector<char*> argv_ptrs = Pointers(argv);
  const std::vector<char*> env_ptrs = Pointers(env);
  const int output =
      ::open(options.output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (output < 0) {
    return UnavailableError(options.what + ": cannot open " + options.output + ": " +
                            std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    BecomeChild(parent, output, options.death_signal, options.what.c_str(), argv_ptrs.data(),
                env_ptrs.data());
  }
  const int fork_errno = errno;
  ::close(output);
  if (pid < 0) {
    return UnavailableError(options.what + ": fork failed: " + std::strerror(fork_errno));
  }
  ::setpgid(pid, pid);  // also from this side: a signal to the group cannot race the child's call
  return pid;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + ::strsignal(WTERMSIG(status));
  return "ended (status " + std::to_string(status) + ")";
}

}  // namespace drover
