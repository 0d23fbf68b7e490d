#include "compute_protocol.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace drover::examples {
namespace {

constexpr std::size_t kMaxLine = 64 * 1024;

bool SendLine(int fd, const std::string& line) {
  const std::string data = line + "\n";
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// One line (without its newline), or nullopt on EOF, timeout or an over-long line.
std::optional<std::string> ReadLine(int fd) {
  std::string line;
  char c;
  while (line.size() <= kMaxLine) {
    const ssize_t n = ::recv(fd, &c, 1, 0);
    if (n <= 0) return std::nullopt;
    if (c == '\n') {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    line += c;
  }
  return std::nullopt;
}

int Millis(Duration d) {
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace

Result<WorkerMode> ParseWorkerMode(const std::string& name) {
  if (name == "ok") return WorkerMode::kOk;
  if (name == "step_error") return WorkerMode::kStepError;
  if (name == "retryable") return WorkerMode::kRetryable;
  if (name == "garbage") return WorkerMode::kGarbage;
  if (name == "crash") return WorkerMode::kCrash;
  return InvalidArgumentError("mode must be ok, step_error, retryable, garbage or crash (got '" +
                              name + "')");
}

void ServeComputeSession(Session& session, const std::string& instance,
                         const WorkerBehaviour& behaviour, jobs::ResultStore& store) {
  const int fd = session.fd();
  const timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const auto line = ReadLine(fd);
  if (!line) return;
  std::istringstream in(*line);
  std::string verb, job, step;
  in >> verb >> job >> step;
  std::string payload;
  std::getline(in, payload);
  if (!payload.empty() && payload.front() == ' ') payload.erase(0, 1);
  if (verb != "JOB" || job.empty() || step.empty()) {
    SendLine(fd, "ERR usage: JOB <job_id> <step> <payload>");
    return;
  }
  if (!SendLine(fd, "ACCEPTED")) return;
  spdlog::info("worker {}: job {} step {} accepted", instance, job, step);
  RealClock().SleepFor(behaviour.work, {});
  jobs::StepResult result;
  Status published;
  switch (behaviour.mode) {
    case WorkerMode::kOk:
      result.content = instance + " did " + payload;
      published = jobs::PublishResult(store, job, step, result, behaviour.result_ttl);
      break;
    case WorkerMode::kStepError:
    case WorkerMode::kRetryable:
      result.status = jobs::StepResult::Status::kError;
      result.retryable = behaviour.mode == WorkerMode::kRetryable;
      // What a real worker writes: an internal path, a control character, a URL.
      result.message = "scene invalid: texture /srv/assets/" + job +
                       ".png missing\x1b[0m (see http://wiki.internal/render)";
      published = jobs::PublishResult(store, job, step, result, behaviour.result_ttl);
      break;
    case WorkerMode::kGarbage:
      published =
          store.Set(jobs::ResultKey(job, step), R"({"state":"finished"})", behaviour.result_ttl);
      (void)store.Publish(jobs::NudgeChannel(job, step), jobs::ResultKey(job, step));
      break;
    case WorkerMode::kCrash:
      spdlog::critical("worker {}: crashing on job {} (mode crash)", instance, job);
      std::abort();
  }
  if (!published.ok()) {
    spdlog::error("worker {}: cannot publish job {} step {}: {}", instance, job, step,
                  published.ToString());
  }
}

Status SubmitJob(const std::string& address, const std::string& job_id, const std::string& step,
                 const std::string& payload, Duration timeout) {
  const std::size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos ||
      ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return InvalidArgumentError("worker address must be ipv4:port (got '" + address + "')");
  }
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(address.c_str() + colon + 1)));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return UnavailableError("socket: " + std::string(std::strerror(errno)));
  auto fail = [&](const std::string& why) {
    ::close(fd);
    return UnavailableError("worker at " + address + ": " + why);
  };
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    return fail(std::strerror(errno));
  }
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, Millis(timeout)) != 1) return fail("connect timed out");
  int error = 0;
  socklen_t len = sizeof error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
  if (error != 0) return fail(std::strerror(error));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const timeval tv{static_cast<time_t>(Millis(timeout) / 1000),
                   static_cast<suseconds_t>((Millis(timeout) % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (!SendLine(fd, "JOB " + job_id + " " + step + " " + payload)) return fail("send failed");
  const auto reply = ReadLine(fd);
  if (!reply) return fail("no answer");
  if (*reply != "ACCEPTED") return fail("refused: " + *reply);
  ::close(fd);
  return Status::Ok();
}

}  // namespace drover::examples
