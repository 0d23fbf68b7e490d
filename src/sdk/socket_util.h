// Small POSIX socket helpers shared by the SDK's blocking servers (health probes, sessions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover::sdk {

struct Listening {
  int fd = -1;
  std::uint16_t port = 0;
};

// Binds and listens on an IPv4 "host:port" (port 0: any free port), close-on-exec, with
// SO_REUSEADDR. The caller owns the descriptor.
Result<Listening> ListenTcp(const std::string& address, int backlog, std::string_view what);

// A loopback port nobody listens on right now (0 if none could be bound). Another process may
// take it before the caller binds it: for tools that must name a port before a child binds it.
std::uint16_t FreeLoopbackPort();

// The first IPv4 address of an interface that is up and not loopback ("10.0.0.5"), or "" when
// this host has none: what a server listening on 0.0.0.0 advertises.
std::string FirstRoutableIpv4();

// OK when `address` is an IPv4 "host:port" ListenTcp would accept.
Status ValidateIpv4Address(const std::string& address, std::string_view what);

// The local "ip:port" a socket is bound to; empty on error.
std::string LocalAddress(int fd);

// Sends everything or gives up quietly at the first error (the peer left; nothing to report).
void SendAll(int fd, std::string_view data);

}  // namespace drover::sdk
