#include "zone_protocol.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <string_view>

namespace drover::examples {
namespace {

constexpr std::size_t kMaxLine = 4096;

bool Send(int fd, std::string_view line) {
  std::string data(line);
  data += "\n";
  std::string_view rest = data;
  while (!rest.empty()) {
    const ssize_t n = ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Answers one line; false when the session should end.
bool Answer(int fd, std::string_view line, const std::string& instance) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.starts_with("HELLO ") && line.size() > 6) return Send(fd, "WELCOME " + instance);
  if (line == "HELLO" || line == "HELLO ") return Send(fd, "ERR usage: HELLO <player>");
  if (line == "PING") return Send(fd, "PONG");
  if (line == "QUIT") {
    Send(fd, "BYE");
    return false;
  }
  return Send(fd, "ERR unknown command");
}

}  // namespace

void ServeZoneSession(Session& session, const std::string& instance,
                      std::chrono::seconds idle_timeout) {
  const int fd = session.fd();
  const timeval timeout{static_cast<time_t>(idle_timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string buffer;
  char chunk[1024];
  while (true) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return;  // the client left, idle too long, or the drain deadline cut us
    buffer.append(chunk, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (std::size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (!Answer(fd, std::string_view(buffer).substr(start, nl - start), instance)) return;
    }
    buffer.erase(0, start);
    if (buffer.size() > kMaxLine) {
      Send(fd, "ERR line too long");
      return;
    }
  }
}

}  // namespace drover::examples
