#include "sdk/socket_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace drover::sdk {

namespace {

Result<sockaddr_in> ParseIpv4(const std::string& address, std::string_view what) {
  const std::size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  int port = -1;
  if (colon != std::string::npos) {
    const char* begin = address.data() + colon + 1;
    const char* end = address.data() + address.size();
    const auto [ptr, ec] = std::from_chars(begin, end, port);
    if (ec != std::errc() || ptr != end || begin == end) port = -1;
  }
  if (port < 0 || port > 65535 ||
      ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return InvalidArgumentError(std::string(what) + " address must be IPv4 host:port, got '" +
                                address + "'");
  }
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  return addr;
}

}  // namespace

Status ValidateIpv4Address(const std::string& address, std::string_view what) {
  auto parsed = ParseIpv4(address, what);
  return parsed.ok() ? Status::Ok() : parsed.status();
}

Result<Listening> ListenTcp(const std::string& address, int backlog, std::string_view what) {
  auto parsed = ParseIpv4(address, what);
  if (!parsed.ok()) return parsed.status();
  sockaddr_in addr = *parsed;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return UnavailableError("cannot listen for " + std::string(what) + " on " + address + ": " +
                            why);
  }
  return Listening{fd, ntohs(addr.sin_port)};
}

std::uint16_t FreeLoopbackPort() {
  auto listening = ListenTcp("127.0.0.1:0", 1, "a free port");
  if (!listening.ok()) return 0;
  ::close(listening->fd);
  return listening->port;
}

std::string LocalAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      addr.sin_family != AF_INET) {
    return {};
  }
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace drover::sdk
