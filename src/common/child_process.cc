#include "common/child_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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

// In the child, between fork and exec: only async-signal-safe calls (no allocation). When exec
// fails, its errno goes to the parent over `exec_error` (close-on-exec: a successful exec closes
// it, which the parent reads as success).
[[noreturn]] void BecomeChild(pid_t parent, int output, int exec_error, int death_signal,
                              const char* what, char* const* argv, char* const* envp) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, death_signal);
  if (::getppid() != parent) ::_exit(127);  // the parent died before the prctl took hold
  ::dup2(output, STDOUT_FILENO);
  ::dup2(output, STDERR_FILENO);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
  // Every other descriptor goes, but the error pipe (moved to 3, still close-on-exec).
  if (exec_error != 3) {
    ::dup3(exec_error, 3, O_CLOEXEC);
    exec_error = 3;
  }
  ::close_range(4, ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execvpe(argv[0], argv, envp);
  const int exec_errno = errno;
  (void)!::write(exec_error, &exec_errno, sizeof exec_errno);
  const char* why = ::strerrordesc_np(exec_errno);
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
  int exec_error[2];
  if (::pipe2(exec_error, O_CLOEXEC) != 0) {
    const int pipe_errno = errno;
    ::close(output);
    return UnavailableError(options.what + ": pipe failed: " + std::strerror(pipe_errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(exec_error[0]);
    BecomeChild(parent, output, exec_error[1], options.death_signal, options.what.c_str(),
                argv_ptrs.data(), env_ptrs.data());
  }
  const int fork_errno = errno;
  ::close(output);
  ::close(exec_error[1]);
  if (pid < 0) {
    ::close(exec_error[0]);
    return UnavailableError(options.what + ": fork failed: " + std::strerror(fork_errno));
  }
  ::setpgid(pid, pid);  // also from this side: a signal to the group cannot race the child's call
  // EOF: the exec happened. An errno: it did not; the child exits 127 at once and is reaped here,
  // and the caller learns why now rather than from a log line.
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_error[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  ::close(exec_error[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string why = "cannot run " + options.argv[0] + ": " + std::strerror(exec_errno);
    // What no retry changes (no such file, no permission, not an executable) is a precondition;
    // the rest passes (a binary still open for writing, out of memory or processes).
    switch (exec_errno) {
      case ENOENT:
      case ENOTDIR:
      case EACCES:
      case EPERM:
      case ENOEXEC:
      case EISDIR:
      case ELOOP:
      case ENAMETOOLONG:
        return FailedPreconditionError(std::move(why));
      default:
        return UnavailableError(std::move(why));
    }
  }
  return pid;
}

Status CheckRunnable(const std::string& program) {
  auto runnable = [](const std::string& path) -> int {  // 0, or why not
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (::access(path.c_str(), X_OK) != 0) return errno;
    return 0;
  };
  if (program.empty()) return InvalidArgumentError("no program to run");
  if (program.find('/') != std::string::npos) {
    if (const int why = runnable(program); why != 0) {
      return FailedPreconditionError("cannot run " + program + ": " + std::strerror(why));
    }
    return Status::Ok();
  }
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/local/bin:/bin:/usr/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end == start ? "." : dirs.substr(start, end - start);
    if (runnable(dir + "/" + program) == 0) return Status::Ok();
    start = end + 1;
  }
  return FailedPreconditionError("cannot run " + program + ": not found in PATH (" + dirs + ")");
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + ::strsignal(WTERMSIG(status));
  return "ended (status " + std::to_string(status) + ")";
}

}  // namespace drover
