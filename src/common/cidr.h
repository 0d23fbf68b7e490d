// Address ranges for allow-lists ("10.0.0.0/8,127.0.0.1,::1/128"): parsed once, matched per
// connection. An address without a prefix length is the one address (/32 or /128); an IPv4
// range never matches an IPv6 address or the reverse (an IPv4-mapped IPv6 address, ::ffff:a.b.c.d,
// is matched as the IPv4 address it carries). Pure functions and immutable values; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"

namespace drover {

struct Cidr {
  bool v6 = false;
  std::array<std::uint8_t, 16> address{};  // IPv4 in the first 4 bytes
  int prefix = 0;

  // Whether `ip` (a literal, IPv6 without brackets) is in the range; false for what is not an IP.
  bool Contains(std::string_view ip) const;
  std::string ToString() const;  // "10.0.0.0/8"
};

// A comma-separated list; INVALID_ARGUMENT naming `what` (the flag) and the bad entry. An empty
// text is an empty list.
Result<std::vector<Cidr>> ParseCidrList(std::string_view text, std::string_view what);

// True when `ip` is in any of `ranges`.
bool AnyContains(const std::vector<Cidr>& ranges, std::string_view ip);

}  // namespace drover
