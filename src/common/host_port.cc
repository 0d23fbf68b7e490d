#include "common/host_port.h"

#include <arpa/inet.h>

#include <charconv>

namespace drover {
namespace {

constexpr std::size_t kMaxName = 253;
constexpr std::size_t kMaxLabel = 63;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

// Empty when `name` is a usable DNS name; otherwise why not.
std::string NameProblem(std::string_view name) {
  if (name.size() > kMaxName) return "the host name is longer than 253 characters";
  std::size_t label = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!IsNameChar(c)) return "the host has a character a host name cannot have";
    if (c == '.') {
      if (label == 0) return "the host name has an empty label";
      label = 0;
      continue;
    }
    if (++label > kMaxLabel) return "a label of the host name is longer than 63 characters";
  }
  if (name.front() == '-' || name.back() == '-' || name.back() == '.') {
    return "the host name starts or ends with '-' or '.'";
  }
  return {};
}

bool IsIpv4(std::string_view host) {
  in_addr ip{};
  return ::inet_pton(AF_INET, std::string(host).c_str(), &ip) == 1;
}

bool IsIpv6(std::string_view host) {
  in6_addr ip{};
  return ::inet_pton(AF_INET6, std::string(host).c_str(), &ip) == 1;
}

}  // namespace

std::string HostPort::ToString() const {
  const std::string p = std::to_string(port);
  return kind == HostKind::kIpv6 ? "[" + host + "]:" + p : host + ":" + p;
}

HostPort HostPort::WithPort(std::uint16_t p) const {
  HostPort copy = *this;
  copy.port = p;
  return copy;
}

bool HostPort::IsLoopback() const {
  switch (kind) {
    case HostKind::kIpv4:
      return host.starts_with("127.");
    case HostKind::kIpv6: {
      in6_addr ip{};
      return ::inet_pton(AF_INET6, host.c_str(), &ip) == 1 && IN6_IS_ADDR_LOOPBACK(&ip);
    }
    case HostKind::kName:
      return host == "localhost";
  }
  return false;
}

bool HostPort::IsWildcard() const {
  if (kind == HostKind::kIpv4) return host == "0.0.0.0";
  in6_addr ip{};
  return kind == HostKind::kIpv6 && ::inet_pton(AF_INET6, host.c_str(), &ip) == 1 &&
         IN6_IS_ADDR_UNSPECIFIED(&ip);
}

Result<HostPort> ParseHostPort(std::string_view text, std::string_view what, HostPortRules rules,
                               HostPortFault* fault) {
  HostPortFault ignored = HostPortFault::kNone;
  HostPortFault& at = fault != nullptr ? *fault : ignored;
  at = HostPortFault::kHost;
  const auto fail = [&](std::string_view why) {
    return InvalidArgumentError(std::string(what) + " '" + std::string(text) +
                                "' is not host:port: " + std::string(why));
  };
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return fail("no ':port'");
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);

  HostPort out;
  if (host.empty()) return fail("the host is missing");
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return fail("an IPv6 literal needs its ']'");
    host = host.substr(1, host.size() - 2);
    if (!IsIpv6(host)) return fail("the bracketed host is not an IPv6 address");
    out.kind = HostKind::kIpv6;
  } else if (host.find(':') != std::string_view::npos) {
    return fail("an IPv6 address goes in brackets, as [::1]:7070");
  } else if (IsIpv4(host)) {
    out.kind = HostKind::kIpv4;
  } else if (const std::string problem = NameProblem(host); !problem.empty()) {
    return fail(problem);
  }
  if (rules.require_ip && out.kind == HostKind::kName) return fail("the host is not an IP address");
  if (rules.ipv4_only && out.kind != HostKind::kIpv4)
    return fail("the host is not an IPv4 address");

  at = HostPortFault::kPort;
  unsigned port = 0;
  const char* end = port_text.data() + port_text.size();
  const auto [ptr, ec] = std::from_chars(port_text.data(), end, port);
  if (port_text.empty() || ec != std::errc() || ptr != end || port > 65535) {
    return fail(rules.allow_port_zero ? "the port must be 0..65535" : "the port must be 1..65535");
  }
  if (port == 0 && !rules.allow_port_zero) return fail("the port must be 1..65535");
  out.host = std::string(host);
  out.port = static_cast<std::uint16_t>(port);
  at = HostPortFault::kNone;
  return out;
}

}  // namespace drover
