#include "sdk/health_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
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

// `body` is sent as given: a message line ends in '\n' (Message), a scrape's text already does.
std::string Response(int status, std::string_view reason, std::string_view body, bool head,
                     std::string_view content_type = "text/plain") {
  std::string out =
      "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
      "\r\nContent-Type: " + std::string(content_type) +
      "\r\nCache-Control: no-cache\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n";
  if (!head) out += body;
  return out;
}

std::string Message(int status, std::string_view reason, std::string_view text, bool head) {
  return Response(status, reason, std::string(text) + "\n", head);
}

}  // namespace

Result<std::unique_ptr<HealthServer>> HealthServer::Start(const std::string& address,
                                                          std::function<Readiness()> ready,
                                                          std::function<std::string()> metrics) {
  auto listening = ListenTcp(address, 64, "health probes");
  if (!listening.ok()) return listening.status();
  std::unique_ptr<HealthServer> server(
      new HealthServer(listening->fd, listening->port, std::move(ready), std::move(metrics)));
  HealthServer* raw = server.get();
  auto acceptor = AcceptThread::Start(listening->fd, "health server", [raw](int fd) {
    raw->Serve(fd);
    ::close(fd);
  });
  if (!acceptor.ok()) return acceptor.status();  // the destructor closes the socket
  server->acceptor_ = std::move(*acceptor);
  return server;
}

HealthServer::HealthServer(int listen_fd, std::uint16_t port, std::function<Readiness()> ready,
                           std::function<std::string()> metrics)
    : listen_fd_(listen_fd), port_(port), ready_(std::move(ready)), metrics_(std::move(metrics)) {}

HealthServer::~HealthServer() { Stop(); }

void HealthServer::Stop() {
  if (acceptor_) acceptor_->Stop();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
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
      SendAll(fd, Message(431, "Request Header Fields Too Large", "request too large", false));
      return;
    }
  }
  const std::string_view line = std::string_view(request).substr(0, request.find("\r\n"));
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) {
    SendAll(fd, Message(400, "Bad Request", "bad request line", false));
    return;
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    SendAll(fd, Message(405, "Method Not Allowed", "GET or HEAD", false));
  } else if (path == "/live") {
    SendAll(fd, Message(200, "OK", "live", head));
  } else if (path == "/ready") {
    const Readiness r = ready_();
    SendAll(fd, r.ready ? Message(200, "OK", "ready", head)
                        : Message(503, "Service Unavailable", "not ready: " + r.reason, head));
  } else if (path == "/metrics" && metrics_) {
    SendAll(fd, Response(200, "OK", metrics_(), head, "text/plain; version=0.0.4; charset=utf-8"));
  } else {
    SendAll(fd, Message(404, "Not Found",
                        metrics_ ? "try /live, /ready or /metrics" : "try /live or /ready", head));
  }
}

}  // namespace drover::sdk
