// "host:port": the one parser for every network address Drover reads -- flags, config files,
// registry requests, URLs' authorities, etcd and Redis endpoints, gRPC peers.
//
// One rule set:
//   host  an IPv4 dotted quad ("10.0.0.5"), an IPv6 literal in brackets ("[::1]"), or a DNS name
//         (letters, digits, '-', '_' and '.', labels of 1..63 characters, 253 at most, not
//         starting or ending with '-' or '.');
//   port  decimal, 1..65535, or 0 where the rules allow it (a listener asking for any free port).
// An IPv6 literal without brackets is refused with a hint: "::1:80" cannot be told from a longer
// address. Errors are INVALID_ARGUMENT "<what> '<text>' is not host:port: <why>", so a message
// names the flag or field and the value it was given.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover {

enum class HostKind : std::uint8_t { kIpv4, kIpv6, kName };

struct HostPort {
  std::string host;  // IPv6 without its brackets
  std::uint16_t port = 0;
  HostKind kind = HostKind::kName;

  bool is_ip() const { return kind != HostKind::kName; }
  // "10.0.0.5:7070", "[::1]:7070", "db.example:7070".
  std::string ToString() const;
  // The same host with another port (a bound port in place of 0).
  HostPort WithPort(std::uint16_t p) const;
  // 127.0.0.0/8, ::1 and "localhost": reachable from this machine only.
  bool IsLoopback() const;
  // 0.0.0.0 and ::, "every interface" when listening.
  bool IsWildcard() const;
};

// Which part of the text was wrong, for callers whose replies have always named it.
enum class HostPortFault : std::uint8_t { kNone, kHost, kPort };

struct HostPortRules {
  bool allow_port_zero = false;  // a listener's "any free port"
  bool require_ip = false;       // an IP literal: no name lookup happens where it is used
  bool ipv4_only = false;        // code that speaks sockaddr_in only
};

// Parses `text` by the rules above; `what` ("--http", "etcd endpoint", "address") starts the
// error message. `fault`, when given, says which part was wrong (kNone on success).
Result<HostPort> ParseHostPort(std::string_view text, std::string_view what,
                               HostPortRules rules = {}, HostPortFault* fault = nullptr);

}  // namespace drover
