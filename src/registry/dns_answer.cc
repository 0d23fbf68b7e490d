#include "registry/dns_answer.h"

#include <ldns/ldns.h>

#include <algorithm>
#include <cctype>
#include <memory>

#include "common/host_port.h"
#include "common/text.h"

namespace drover::registry {
namespace {

constexpr std::size_t kHeaderSize = 12;
constexpr std::size_t kUdpPlain = 512;
// What we offer and accept over UDP with EDNS: the DNS flag day 2020 size, which no path MTU
// fragments.
constexpr std::uint16_t kUdpEdnsMax = 1232;
constexpr std::size_t kTcpMax = 65535;
constexpr std::uint8_t kBadVersion = 1;  // extended RCODE 16 (BADVERS): high bits 1, low bits 0
constexpr std::size_t kMaxSplits = 4;    // dotted instance ids of up to 4 labels

struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
struct RrFree {
  void operator()(ldns_rr* r) const { ldns_rr_free(r); }
};
struct RdfFree {
  void operator()(ldns_rdf* r) const { ldns_rdf_deep_free(r); }
};
using Pkt = std::unique_ptr<ldns_pkt, PktFree>;
using Rr = std::unique_ptr<ldns_rr, RrFree>;
using Rdf = std::unique_ptr<ldns_rdf, RdfFree>;

// A name's labels, lowercased, from its uncompressed wire form (ldns decompresses). nullopt for a
// label with a byte that cannot be in a registry name ('.' included): such a name matches nothing.
std::optional<std::vector<std::string>> Labels(const ldns_rdf* name) {
  const std::uint8_t* data = ldns_rdf_data(name);
  const std::size_t size = ldns_rdf_size(name);
  std::vector<std::string> labels;
  std::size_t at = 0;
  while (at < size && data[at] != 0) {
    const std::size_t length = data[at++];
    if (at + length > size) return std::nullopt;
    std::string label;
    for (std::size_t i = 0; i < length; ++i) {
      const char c = static_cast<char>(data[at + i]);
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
        return std::nullopt;
      }
      label.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    labels.push_back(std::move(label));
    at += length;
  }
  return labels;
}

std::string Join(const std::vector<std::string>& labels, std::size_t from, std::size_t to) {
  std::string out;
  for (std::size_t i = from; i < to; ++i) {
    if (i > from) out.push_back('.');
    out += labels[i];
  }
  return out;
}

std::vector<std::string> DomainLabels(const DnsZone& zone) {
  std::vector<std::string> labels;
  std::string_view rest = zone.domain;
  while (!rest.empty()) {
    const std::size_t dot = rest.find('.');
    labels.push_back(AsciiLower(rest.substr(0, dot)));
    if (dot == std::string_view::npos) break;
    rest.remove_prefix(dot + 1);
  }
  return labels;
}

// What a question's name stands for.
enum class NameKind : std::uint8_t {
  kOutside,   // not under the domain: REFUSED
  kNoSuch,    // under it, but nothing of that name: NXDOMAIN
  kEmpty,     // the domain or service.<domain>: exists, no records but the apex SOA
  kService,   // <service>.service.<domain>: A, AAAA, SRV
  kSrvOnly,   // _<service>[._tcp|._udp].service.<domain>: SRV
  kInstance,  // <instance>.<service>.service.<domain>: A, AAAA
};

struct Named {
  NameKind kind = NameKind::kNoSuch;
  bool apex = false;
  std::vector<Instance> instances;  // kService, kSrvOnly: all of the service's; kInstance: one
};

Named Classify(const ldns_rdf* owner, const DnsZone& zone, const DnsCatalog& catalog) {
  Named named;
  const std::vector<std::string> domain = DomainLabels(zone);
  const auto labels = Labels(owner);
  if (!labels) {
    named.kind = NameKind::kOutside;
    return named;
  }
  // The domain's labels must end the name.
  if (labels->size() < domain.size() ||
      !std::equal(domain.begin(), domain.end(), labels->end() - domain.size())) {
    named.kind = NameKind::kOutside;
    return named;
  }
  std::vector<std::string> rest(labels->begin(), labels->end() - domain.size());
  if (rest.empty()) {
    named.kind = NameKind::kEmpty;
    named.apex = true;
    return named;
  }
  if (rest.back() != "service") return named;  // kNoSuch
  rest.pop_back();
  if (rest.empty()) {
    named.kind = NameKind::kEmpty;
    return named;
  }
  if (rest.front().starts_with('_')) {
    std::size_t end = rest.size();
    if (end >= 2 && (rest.back() == "_tcp" || rest.back() == "_udp")) --end;
    const std::string service = Join(rest, 0, end).substr(1);
    if (auto found = catalog.Instances(service)) {
      named.kind = NameKind::kSrvOnly;
      named.instances = std::move(*found);
    }
    return named;
  }
  if (auto found = catalog.Instances(Join(rest, 0, rest.size()))) {
    named.kind = NameKind::kService;
    named.instances = std::move(*found);
    return named;
  }
  // <instance>.<service>: either may hold dots, so try each split, the longest service first --
  // a few at most: a name of a hundred labels must not cost a hundred look-ups.
  for (std::size_t split = 1; split < rest.size() && split <= kMaxSplits; ++split) {
    auto found = catalog.Instances(Join(rest, split, rest.size()));
    if (!found) continue;
    const std::string id = Join(rest, 0, split);
    for (Instance& instance : *found) {
      if (EqualsIgnoreCase(instance.id, id)) {
        named.kind = NameKind::kInstance;
        named.instances.push_back(std::move(instance));
        return named;
      }
    }
  }
  return named;
}

Rdf Dname(const std::string& text) { return Rdf(ldns_dname_new_frm_str(text.c_str())); }

Rr NewRr(ldns_rdf* owner, ldns_rr_type type, std::uint32_t ttl) {
  Rr rr(ldns_rr_new());
  ldns_rr_set_owner(rr.get(), ldns_rdf_clone(owner));
  ldns_rr_set_type(rr.get(), type);
  ldns_rr_set_class(rr.get(), LDNS_RR_CLASS_IN);
  ldns_rr_set_ttl(rr.get(), ttl);
  return rr;
}

// The address record of `host` (an IP literal) under `owner`, or nothing for a DNS name.
Rr AddressRr(ldns_rdf* owner, const HostPort& host, std::uint32_t ttl) {
  if (host.kind == HostKind::kName) return nullptr;
  const bool v4 = host.kind == HostKind::kIpv4;
  Rdf address(ldns_rdf_new_frm_str(v4 ? LDNS_RDF_TYPE_A : LDNS_RDF_TYPE_AAAA, host.host.c_str()));
  if (!address) return nullptr;
  Rr rr = NewRr(owner, v4 ? LDNS_RR_TYPE_A : LDNS_RR_TYPE_AAAA, ttl);
  ldns_rr_push_rdf(rr.get(), address.release());
  return rr;
}

struct Sections {
  std::vector<Rr> answer;
  std::vector<Rr> authority;
  std::vector<Rr> additional;
};

// The zone's SOA, for negative answers (RFC 2308: its minimum bounds how long they are cached).
Rr Soa(const DnsZone& zone) {
  Rdf apex = Dname(zone.domain + ".");
  Rdf primary = Dname("ns." + zone.domain + ".");
  Rdf mailbox = Dname("hostmaster." + zone.domain + ".");
  if (!apex || !primary || !mailbox) return nullptr;
  Rr rr = NewRr(apex.get(), LDNS_RR_TYPE_SOA, zone.ttl_s);
  ldns_rr_push_rdf(rr.get(), primary.release());
  ldns_rr_push_rdf(rr.get(), mailbox.release());
  ldns_rr_push_rdf(rr.get(), ldns_native2rdf_int32(LDNS_RDF_TYPE_INT32, 1));  // serial
  for (std::uint32_t seconds : {60u, 60u, 3600u, zone.ttl_s}) {  // refresh retry expire minimum
    ldns_rr_push_rdf(rr.get(), ldns_native2rdf_int32(LDNS_RDF_TYPE_PERIOD, seconds));
  }
  return rr;
}

void AddressAnswers(const Named& named, ldns_rdf* owner, ldns_rr_type type, const DnsZone& zone,
                    Sections& out) {
  std::vector<std::string> seen;  // an RRset holds each address once (RFC 2181 5)
  for (const Instance& instance : named.instances) {
    if (named.kind != NameKind::kInstance && !instance.Serving()) continue;
    auto host = ParseHostPort(instance.spec.address, "address");
    if (!host.ok()) continue;
    const bool wanted =
        type == LDNS_RR_TYPE_A ? host->kind == HostKind::kIpv4 : host->kind == HostKind::kIpv6;
    if (!wanted || std::find(seen.begin(), seen.end(), host->host) != seen.end()) continue;
    if (Rr rr = AddressRr(owner, *host, zone.ttl_s)) {
      seen.push_back(host->host);
      out.answer.push_back(std::move(rr));
    }
  }
}

void SrvAnswers(const Named& named, ldns_rdf* owner, const DnsZone& zone, Sections& out) {
  for (const Instance& instance : named.instances) {
    if (!instance.Serving()) continue;
    auto host = ParseHostPort(instance.spec.address, "address");
    if (!host.ok()) continue;
    const std::string target_name =
        host->kind == HostKind::kName
            ? host->host + "."
            : instance.id + "." + instance.service + ".service." + zone.domain + ".";
    Rdf target = Dname(target_name);
    if (!target) continue;  // a label over 63 characters: no name to give it
    Rr srv = NewRr(owner, LDNS_RR_TYPE_SRV, zone.ttl_s);
    ldns_rr_push_rdf(srv.get(), ldns_native2rdf_int16(LDNS_RDF_TYPE_INT16, 0));  // priority
    const auto weight =
        static_cast<std::uint16_t>(std::min<std::uint32_t>(instance.spec.weight, 65535));
    ldns_rr_push_rdf(srv.get(), ldns_native2rdf_int16(LDNS_RDF_TYPE_INT16, weight));
    ldns_rr_push_rdf(srv.get(), ldns_native2rdf_int16(LDNS_RDF_TYPE_INT16, host->port));
    if (Rr address = AddressRr(target.get(), *host, zone.ttl_s)) {
      out.additional.push_back(std::move(address));
    }
    ldns_rr_push_rdf(srv.get(), target.release());
    out.answer.push_back(std::move(srv));
  }
}

struct Header {
  std::uint16_t id = 0;
  std::uint8_t opcode = 0;  // as the query had it (4 bits; ldns's enum names only some)
  bool rd = false;
  std::uint8_t rcode = LDNS_RCODE_NOERROR;
  bool bad_version = false;
  bool edns = false;
  bool truncated = false;
};

// The reply's wire form with these sections (cloned: the caller may encode again with fewer).
std::vector<std::uint8_t> Encode(const Header& h, const ldns_rr* question, const Sections& s,
                                 std::size_t answers) {
  Pkt p(ldns_pkt_new());
  if (!p) return {};
  ldns_pkt_set_id(p.get(), h.id);
  ldns_pkt_set_qr(p.get(), true);
  ldns_pkt_set_aa(p.get(), h.rcode != LDNS_RCODE_REFUSED && h.rcode != LDNS_RCODE_NOTIMPL);
  ldns_pkt_set_rd(p.get(), h.rd);
  ldns_pkt_set_tc(p.get(), h.truncated);
  ldns_pkt_set_rcode(p.get(), h.rcode);
  if (h.edns) {
    ldns_pkt_set_edns_udp_size(p.get(), kUdpEdnsMax);
    if (h.bad_version) ldns_pkt_set_edns_extended_rcode(p.get(), kBadVersion);
  }
  if (question != nullptr) {
    ldns_pkt_push_rr(p.get(), LDNS_SECTION_QUESTION, ldns_rr_clone(question));
  }
  for (std::size_t i = 0; i < answers && i < s.answer.size(); ++i) {
    ldns_pkt_push_rr(p.get(), LDNS_SECTION_ANSWER, ldns_rr_clone(s.answer[i].get()));
  }
  for (const Rr& rr : s.authority) {
    ldns_pkt_push_rr(p.get(), LDNS_SECTION_AUTHORITY, ldns_rr_clone(rr.get()));
  }
  for (const Rr& rr : s.additional) {
    ldns_pkt_push_rr(p.get(), LDNS_SECTION_ADDITIONAL, ldns_rr_clone(rr.get()));
  }
  std::uint8_t* wire = nullptr;
  std::size_t size = 0;
  if (ldns_pkt2wire(&wire, p.get(), &size) != LDNS_STATUS_OK || wire == nullptr) return {};
  std::vector<std::uint8_t> out(wire, wire + size);
  LDNS_FREE(wire);
  if (out.size() > 2) out[2] = static_cast<std::uint8_t>((out[2] & ~0x78) | (h.opcode << 3));
  return out;
}

// Fits the reply in `limit` bytes (see the header): additional records go first; then over UDP
// every record, with TC; over TCP as many answers as fit, with TC.
DnsReply Fit(Header h, const ldns_rr* question, Sections& s, std::size_t limit,
             DnsTransport transport) {
  DnsReply reply;
  reply.rcode = h.rcode;
  std::size_t answers = s.answer.size();
  reply.wire = Encode(h, question, s, answers);
  if (reply.wire.size() > limit && !s.additional.empty()) {
    s.additional.clear();
    reply.wire = Encode(h, question, s, answers);
  }
  if (reply.wire.size() > limit) {
    h.truncated = true;
    if (transport == DnsTransport::kUdp) {
      answers = 0;
      s.authority.clear();
      reply.wire = Encode(h, question, s, answers);
    } else {
      while (reply.wire.size() > limit && answers > 0) {
        // Each record costs about the same: drop the share that is over, plus one.
        const std::size_t over = answers * (reply.wire.size() - limit) / reply.wire.size() + 1;
        answers -= std::min(answers, over);
        reply.wire = Encode(h, question, s, answers);
      }
    }
  }
  reply.truncated = h.truncated;
  reply.answers = answers;
  return reply;
}

// A reply with no question: to a message ldns could not parse, or with other than one question.
DnsReply Refuse(std::uint16_t id, std::uint8_t opcode, bool rd, std::uint8_t rcode) {
  Header h;
  h.id = id;
  h.opcode = opcode;
  h.rd = rd;
  h.rcode = rcode;
  Sections none;
  DnsReply reply;
  reply.rcode = rcode;
  reply.wire = Encode(h, nullptr, none, 0);
  return reply;
}

}  // namespace

Status ValidateDnsZone(const DnsZone& zone) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("--dns-domain '" + zone.domain + "' " + std::string(why));
  };
  if (zone.domain.empty() || zone.domain.size() > 253) return bad("must be 1..253 characters");
  std::string_view rest = zone.domain;
  while (true) {
    const std::size_t dot = rest.find('.');
    const std::string_view label = rest.substr(0, dot);
    if (label.empty() || label.size() > 63) return bad("has an empty or over-63-character label");
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') {
        return bad("may hold only letters, digits, '-' and '.'");
      }
    }
    if (label.front() == '-' || label.back() == '-')
      return bad("has a label starting or ending with '-'");
    if (dot == std::string_view::npos) break;
    rest.remove_prefix(dot + 1);
  }
  if (zone.ttl_s > 86'400) {
    return InvalidArgumentError("--dns-ttl " + std::to_string(zone.ttl_s) +
                                " is over a day (86400 s)");
  }
  return Status::Ok();
}

DnsReply AnswerDnsQuery(std::span<const std::uint8_t> query, DnsTransport transport,
                        const DnsZone& zone, const DnsCatalog& catalog) {
  if (query.size() < kHeaderSize) return {};
  const bool is_response = (query[2] & 0x80) != 0;
  if (is_response) return {};  // never answer an answer: no loops between two servers
  const auto id = static_cast<std::uint16_t>((query[0] << 8) | query[1]);
  const auto opcode = static_cast<std::uint8_t>((query[2] >> 3) & 0x0f);
  const bool rd = (query[2] & 0x01) != 0;

  ldns_pkt* parsed = nullptr;
  if (ldns_wire2pkt(&parsed, query.data(), query.size()) != LDNS_STATUS_OK) {
    if (parsed != nullptr) ldns_pkt_free(parsed);
    return Refuse(id, opcode, rd, LDNS_RCODE_FORMERR);
  }
  Pkt q(parsed);
  if (opcode != LDNS_PACKET_QUERY) return Refuse(id, opcode, rd, LDNS_RCODE_NOTIMPL);
  if (ldns_pkt_qdcount(q.get()) != 1 || ldns_rr_list_rr_count(ldns_pkt_question(q.get())) != 1) {
    return Refuse(id, opcode, rd, LDNS_RCODE_FORMERR);
  }
  const ldns_rr* question = ldns_rr_list_rr(ldns_pkt_question(q.get()), 0);

  Header h;
  h.id = id;
  h.opcode = opcode;
  h.rd = rd;
  h.edns = ldns_pkt_edns(q.get());
  std::size_t limit = kTcpMax;
  if (transport == DnsTransport::kUdp) {
    limit = h.edns
                ? std::clamp<std::size_t>(ldns_pkt_edns_udp_size(q.get()), kUdpPlain, kUdpEdnsMax)
                : kUdpPlain;
  }
  Sections s;
  if (h.edns && ldns_pkt_edns_version(q.get()) != 0) {
    h.bad_version = true;  // RFC 6891 6.1.3: we speak EDNS version 0 only
    return Fit(h, question, s, limit, transport);
  }
  const ldns_rr_type type = ldns_rr_get_type(question);
  if (ldns_rr_get_class(question) != LDNS_RR_CLASS_IN || type == LDNS_RR_TYPE_AXFR ||
      type == LDNS_RR_TYPE_IXFR || type == LDNS_RR_TYPE_ANY) {
    h.rcode = LDNS_RCODE_REFUSED;
    return Fit(h, question, s, limit, transport);
  }

  ldns_rdf* owner = ldns_rr_owner(question);
  const Named named = Classify(owner, zone, catalog);
  switch (named.kind) {
    case NameKind::kOutside:
      h.rcode = LDNS_RCODE_REFUSED;
      return Fit(h, question, s, limit, transport);
    case NameKind::kNoSuch:
      h.rcode = LDNS_RCODE_NXDOMAIN;
      break;
    case NameKind::kEmpty:
      if (named.apex && type == LDNS_RR_TYPE_SOA) {
        if (Rr soa = Soa(zone)) s.answer.push_back(std::move(soa));
      }
      break;
    case NameKind::kService:
    case NameKind::kInstance:
      if (type == LDNS_RR_TYPE_A || type == LDNS_RR_TYPE_AAAA) {
        AddressAnswers(named, owner, type, zone, s);
      } else if (type == LDNS_RR_TYPE_SRV && named.kind == NameKind::kService) {
        SrvAnswers(named, owner, zone, s);
      }
      break;
    case NameKind::kSrvOnly:
      if (type == LDNS_RR_TYPE_SRV) SrvAnswers(named, owner, zone, s);
      break;
  }
  if (s.answer.empty()) {
    if (Rr soa = Soa(zone)) s.authority.push_back(std::move(soa));
  }
  return Fit(h, question, s, limit, transport);
}

}  // namespace drover::registry
