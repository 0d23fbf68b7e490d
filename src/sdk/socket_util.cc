#include "sdk/socket_util.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/host_port.h"

namespace drover::sdk {

namespace {

Result<sockaddr_in> ParseIpv4(const std::string& address, std::string_view what) {
  const std::string label = std::string(what) + " address";
  DROVER_ASSIGN_OR_RETURN(
      const HostPort hp,
      ParseHostPort(address, label, {.allow_port_zero = true, .ipv4_only = true}));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, hp.host.c_str(), &addr.sin_addr);
  addr.sin_port = htons(hp.port);
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

std::string FirstRoutableIpv4() {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string found;
  for (const ifaddrs* i = all; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) found = text;
  }
  ::freeifaddrs(all);
  return found;
}

}  // namespace drover::sdk
