// DNS answers about the fleet (issue 24): what the registry's DNS listener (dns_server.h) says to
// one query, for clients that have no SDK -- HAProxy's and nginx's resolvers, dig, plain
// getaddrinfo. Names, under a domain (default "drover"):
//
//   <service>.service.<domain>             A / AAAA: READY and accepting instances' addresses;
//                                          SRV: one record per such instance (port, weight)
//   _<service>._tcp.service.<domain>       SRV only (RFC 2782 names: HAProxy's resolvers make an
//   _<service>.service.<domain>            SRV query only of a name that starts with '_')
//   <instance>.<service>.service.<domain>  A / AAAA: that instance's address, whatever its state
//                                          (the target of its SRV record)
//
// SRV records carry priority 0, the instance's weight (capped at 65,535) and its port; their
// target is the instance's name above, answered in the additional section too, or the instance's
// host itself when that is a DNS name (no A/AAAA comes from a name: the registry does not
// resolve). A name is compared without regard to case; service names are matched whole first,
// so a service or instance name with dots still resolves (an instance id of up to 4 labels).
//
// Everything else is refused, never forwarded: names outside the domain and the classes other
// than IN get REFUSED (no recursion: RA is never set), as do zone transfers and ANY; opcodes
// other than QUERY get NOTIMP; a message with other than one question, or that does not parse,
// FORMERR; a message that is itself a response gets nothing. Unknown names under
// `service.<domain>` are NXDOMAIN, and a name that exists without records of the type asked is an
// empty NOERROR; both carry the zone's SOA (minimum = the TTL) so resolvers cache them no longer
// than an answer. Every record's TTL is the zone's (default 1 s).
//
// Size: over UDP an answer fits 512 bytes, or the EDNS size the query offers (at most 1,232, the
// size that avoids IP fragmentation); over TCP 65,535. An answer that does not fit loses its
// additional records first (RFC 2181 9), then, over UDP, all its records with the TC bit set, so
// the client asks again over TCP and gets the whole list there.
//
// Encoding and decoding are ldns's (Debian libldns): its parser has seen far more malformed
// packets than one written here would, and it compresses names. Pure functions but for the
// catalog's look-ups; thread-safe when the catalog is.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "registry/model.h"

namespace drover::registry {

struct DnsZone {
  std::string domain = "drover";  // one or more labels, no trailing dot
  std::uint32_t ttl_s = 1;
};

// Checks the domain (labels of 1..63 of [A-Za-z0-9-], 253 at most in all) and the TTL
// (<= 86,400 s); INVALID_ARGUMENT naming the flag otherwise.
Status ValidateDnsZone(const DnsZone& zone);

// Where answers come from.
class DnsCatalog {
 public:
  virtual ~DnsCatalog() = default;
  // Every instance of `service` (exact name, or else one that differs only in case), in any
  // state; nullopt when no such service has an instance.
  virtual std::optional<std::vector<Instance>> Instances(std::string_view service) const = 0;
};

enum class DnsTransport : std::uint8_t { kUdp, kTcp };

struct DnsReply {
  std::vector<std::uint8_t> wire;  // the message to send; empty: send nothing
  std::uint8_t rcode = 0;          // LDNS_RCODE_*, for the server's counters and logs
  bool truncated = false;          // the TC bit is set
  std::size_t answers = 0;         // records in the answer section
};

DnsReply AnswerDnsQuery(std::span<const std::uint8_t> query, DnsTransport transport,
                        const DnsZone& zone, const DnsCatalog& catalog);

}  // namespace drover::registry
