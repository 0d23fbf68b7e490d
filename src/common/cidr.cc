#include "common/cidr.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/text.h"

namespace drover {
namespace {

// The address bytes of `ip` (IPv4 in the first 4), or false. ::ffff:a.b.c.d counts as IPv4.
bool ParseIp(std::string_view ip, bool& v6, std::array<std::uint8_t, 16>& out) {
  const std::string text(ip);
  out = {};
  if (::inet_pton(AF_INET, text.c_str(), out.data()) == 1) {
    v6 = false;
    return true;
  }
  if (::inet_pton(AF_INET6, text.c_str(), out.data()) != 1) return false;
  static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(out.data(), kMapped, sizeof kMapped) == 0) {
    std::memmove(out.data(), out.data() + 12, 4);
    std::memset(out.data() + 4, 0, 12);
    v6 = false;
    return true;
  }
  v6 = true;
  return true;
}

bool PrefixMatches(const std::array<std::uint8_t, 16>& a, const std::array<std::uint8_t, 16>& b,
                   int prefix) {
  const int whole = prefix / 8;
  if (std::memcmp(a.data(), b.data(), static_cast<std::size_t>(whole)) != 0) return false;
  const int rest = prefix % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (a[static_cast<std::size_t>(whole)] & mask) == (b[static_cast<std::size_t>(whole)] & mask);
}

}  // namespace

bool Cidr::Contains(std::string_view ip) const {
  bool is_v6 = false;
  std::array<std::uint8_t, 16> bytes{};
  if (!ParseIp(ip, is_v6, bytes) || is_v6 != v6) return false;
  return PrefixMatches(address, bytes, prefix);
}

std::string Cidr::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(v6 ? AF_INET6 : AF_INET, address.data(), text, sizeof text);
  return std::string(text) + "/" + std::to_string(prefix);
}

Result<std::vector<Cidr>> ParseCidrList(std::string_view text, std::string_view what) {
  std::vector<Cidr> out;
  for (const std::string& item : SplitCommaList(text)) {
    const std::string_view entry = item;
    if (entry.empty()) continue;
    auto bad = [&](std::string_view why) {
      return InvalidArgumentError(std::string(what) + " '" + std::string(entry) + "' " +
                                  std::string(why));
    };
    const std::size_t slash = entry.find('/');
    Cidr cidr;
    if (!ParseIp(entry.substr(0, slash), cidr.v6, cidr.address)) {
      return bad("is not an IP address or range (10.0.0.0/8, ::1/128)");
    }
    const int max = cidr.v6 ? 128 : 32;
    cidr.prefix = max;
    if (slash != std::string_view::npos) {
      const std::string_view digits = entry.substr(slash + 1);
      if (digits.empty() || digits.size() > 3 ||
          digits.find_first_not_of("0123456789") != std::string_view::npos) {
        return bad("has a bad prefix length");
      }
      cidr.prefix = std::stoi(std::string(digits));
      if (cidr.prefix > max) return bad("has a prefix length over " + std::to_string(max));
    }
    // Bits past the prefix are zeroed, so "10.1.2.3/8" is 10.0.0.0/8 (as most tools read it).
    for (int bit = cidr.prefix; bit < max; ++bit) {
      cidr.address[static_cast<std::size_t>(bit / 8)] &=
          static_cast<std::uint8_t>(~(0x80 >> (bit % 8)));
    }
    out.push_back(cidr);
  }
  return out;
}

bool AnyContains(const std::vector<Cidr>& ranges, std::string_view ip) {
  for (const Cidr& c : ranges) {
    if (c.Contains(ip)) return true;
  }
  return false;
}

}  // namespace drover
