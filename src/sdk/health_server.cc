#include "sdk/health_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "sdk/socket_util.h"

namespace drover::sdk {
namespace {

constexpr std::size_t kMaxRequest = 8 * 1024;
constexpr int kSocketTimeoutSeconds = 2;

std::string Response(int status, std::string_view reason, std::string_view body, bool head) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
                    "\r\nContent-Type: text/plain\r\nCache-Control: no-cache\r\nContent-Length: " +
                    std::to_string(body.size() + 1) + "\r\nConnection: close\r\n\r\n";
  if (!head) {
    out += body;
    out += "\n";
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<HealthServer>> HealthServer::Start(const std::string& address,
                                                          std::function<Readiness()> ready) {
  auto listening = ListenTcp(address, 64, "health probes");
  if (!listening.ok()) return listening.status();
  const int fd = listening->fd;
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    return InternalError("eventfd failed");
  }
  return std::unique_ptr<HealthServer>(
      new HealthServer(fd, wake, listening->port, std::move(ready)));
}

HealthServer::HealthServer(int listen_fd, int wake_fd, std::uint16_t port,
                           std::function<Readiness()> ready)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), ready_(std::move(ready)) {
  thread_ = std::thread([this] { Run(); });
}

HealthServer::~HealthServer() {
  Stop();
  ::close(wake_fd_);
}

void HealthServer::Stop() {
  if (thread_.joinable()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

void HealthServer::Run() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("health server: poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;  // the client left, or out of descriptors: the next probe retries
    Serve(conn);
    ::close(conn);
  }
}

void HealthServer::Serve(int fd) {
  const timeval timeout{kSocketTimeoutSeconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;  // closed, or too slow
    request.append(buf, static_cast<std::size_t>(n));
    if (request.size() > kMaxRequest) {
      SendAll(fd, Response(431, "Request Header Fields Too Large", "request too large", false));
      return;
    }
  }
  const std::string_view line = std::string_view(request).substr(0, request.find("\r\n"));
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) {
    SendAll(fd, Response(400, "Bad Request", "bad request line", false));
    return;
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    SendAll(fd, Response(405, "Method Not Allowed", "GET or HEAD", false));
  } else if (path == "/live") {
    SendAll(fd, Response(200, "OK", "live", head));
  } else if (path == "/ready") {
    const Readiness r = ready_();
    SendAll(fd, r.ready ? Response(200, "OK", "ready", head)
                        : Response(503, "Service Unavailable", "not ready: " + r.reason, head));
  } else {
    SendAll(fd, Response(404, "Not Found", "try /live or /ready", head));
  }
}

}  // namespace drover::sdk
