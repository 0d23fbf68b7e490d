// The registry's DNS answers (dns_answer.h) against a catalog in memory: queries are built and
// replies read with ldns, as a resolver's would be.
#include "registry/dns_answer.h"

#include <gtest/gtest.h>
#include <ldns/ldns.h>

#include <algorithm>
#include <map>
#include <memory>

namespace drover::registry {
namespace {

struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using Pkt = std::unique_ptr<ldns_pkt, PktFree>;

class FakeCatalog final : public DnsCatalog {
 public:
  std::optional<std::vector<Instance>> Instances(std::string_view service) const override {
    for (const auto& [name, instances] : services) {
      if (name.size() == service.size() &&
          std::equal(name.begin(), name.end(), service.begin(),
                     [](char a, char b) { return std::tolower(a) == std::tolower(b); })) {
        return instances;
      }
    }
    return std::nullopt;
  }
  void Add(const std::string& service, const std::string& id, const std::string& address,
           InstanceState state = InstanceState::kReady, std::uint32_t weight = 1,
           bool accepting = true) {
    Instance instance;
    instance.service = service;
    instance.id = id;
    instance.spec.address = address;
    instance.spec.state = state;
    instance.spec.weight = weight;
    instance.spec.accepting = accepting;
    services[service].push_back(instance);
  }
  std::map<std::string, std::vector<Instance>> services;
};

struct Query {
  std::string name;
  ldns_rr_type type = LDNS_RR_TYPE_A;
  ldns_rr_class klass = LDNS_RR_CLASS_IN;
  std::uint16_t edns_size = 0;  // 0: no EDNS
  std::uint8_t edns_version = 0;
  ldns_pkt_opcode opcode = LDNS_PACKET_QUERY;
};

std::vector<std::uint8_t> Wire(const Query& q) {
  Pkt p(ldns_pkt_query_new(ldns_dname_new_frm_str(q.name.c_str()), q.type, q.klass, LDNS_RD));
  ldns_pkt_set_id(p.get(), 4242);
  ldns_pkt_set_opcode(p.get(), q.opcode);
  if (q.edns_size != 0) {
    ldns_pkt_set_edns_udp_size(p.get(), q.edns_size);
    ldns_pkt_set_edns_version(p.get(), q.edns_version);
  }
  std::uint8_t* wire = nullptr;
  std::size_t size = 0;
  EXPECT_EQ(ldns_pkt2wire(&wire, p.get(), &size), LDNS_STATUS_OK);
  std::vector<std::uint8_t> out(wire, wire + size);
  LDNS_FREE(wire);
  return out;
}

class DnsAnswerTest : public ::testing::Test {
 protected:
  DnsAnswerTest() {
    catalog_.Add("zone", "z1", "10.0.0.1:9001", InstanceState::kReady, 5);
    catalog_.Add("zone", "z2", "10.0.0.2:9002", InstanceState::kReady, 1'000'000);
    catalog_.Add("zone", "z3", "[fd00::3]:9003");
    catalog_.Add("zone", "z4", "10.0.0.4:9004", InstanceState::kStarting);
    catalog_.Add("zone", "z5", "10.0.0.5:9005", InstanceState::kDraining);
    catalog_.Add("zone", "z6", "10.0.0.6:9006", InstanceState::kReady, 1, /*accepting=*/false);
    catalog_.Add("zone", "z7", "10.0.0.1:9007");  // same host as z1, another port
  }

  DnsReply Ask(const Query& q, DnsTransport transport = DnsTransport::kUdp) {
    return AnswerDnsQuery(Wire(q), transport, zone_, catalog_);
  }
  static Pkt Parse(const DnsReply& reply) {
    ldns_pkt* p = nullptr;
    EXPECT_EQ(ldns_wire2pkt(&p, reply.wire.data(), reply.wire.size()), LDNS_STATUS_OK);
    return Pkt(p);
  }
  // Each record of a section as dig prints it, without owner, TTL and class: "SRV 0 5 9001 x."
  static std::vector<std::string> Records(ldns_pkt* p, ldns_pkt_section section) {
    std::vector<std::string> out;
    ldns_rr_list* list = ldns_pkt_get_section_clone(p, section);
    for (std::size_t i = 0; i < ldns_rr_list_rr_count(list); ++i) {
      ldns_rr* rr = ldns_rr_list_rr(list, i);
      char* type = ldns_rr_type2str(ldns_rr_get_type(rr));
      std::string text = type;
      LDNS_FREE(type);
      for (std::size_t f = 0; f < ldns_rr_rd_count(rr); ++f) {
        char* field = ldns_rdf2str(ldns_rr_rdf(rr, f));
        text += std::string(" ") + field;
        LDNS_FREE(field);
      }
      out.push_back(text);
    }
    ldns_rr_list_deep_free(list);
    std::sort(out.begin(), out.end());
    return out;
  }

  FakeCatalog catalog_;
  DnsZone zone_;
};

TEST_F(DnsAnswerTest, SrvListsReadyAcceptingInstancesWithTheirAddressesBeside) {
  const DnsReply reply = Ask({.name = "zone.service.drover", .type = LDNS_RR_TYPE_SRV});
  Pkt p = Parse(reply);
  EXPECT_EQ(ldns_pkt_get_rcode(p.get()), LDNS_RCODE_NOERROR);
  EXPECT_EQ(ldns_pkt_id(p.get()), 4242);
  EXPECT_TRUE(ldns_pkt_qr(p.get()));
  EXPECT_TRUE(ldns_pkt_aa(p.get()));
  EXPECT_TRUE(ldns_pkt_rd(p.get()));   // copied from the query
  EXPECT_FALSE(ldns_pkt_ra(p.get()));  // no recursion here
  // STARTING, DRAINING and not accepting are left out; the weight is capped at 16 bits.
  EXPECT_EQ(
      Records(p.get(), LDNS_SECTION_ANSWER),
      (std::vector<std::string>{
          "SRV 0 1 9003 z3.zone.service.drover.", "SRV 0 1 9007 z7.zone.service.drover.",
          "SRV 0 5 9001 z1.zone.service.drover.", "SRV 0 65535 9002 z2.zone.service.drover."}));
  EXPECT_EQ(Records(p.get(), LDNS_SECTION_ADDITIONAL),
            (std::vector<std::string>{"A 10.0.0.1", "A 10.0.0.1", "A 10.0.0.2", "AAAA fd00::3"}));
  ldns_rr* first = ldns_rr_list_rr(ldns_pkt_answer(p.get()), 0);
  EXPECT_EQ(ldns_rr_ttl(first), 1u);
}

TEST_F(DnsAnswerTest, RfcNamesAnswerSrvOnly) {
  for (const char* name : {"_zone._tcp.service.drover", "_zone.service.drover"}) {
    Pkt srv = Parse(Ask({.name = name, .type = LDNS_RR_TYPE_SRV}));
    EXPECT_EQ(Records(srv.get(), LDNS_SECTION_ANSWER).size(), 4u) << name;
    Pkt a = Parse(Ask({.name = name, .type = LDNS_RR_TYPE_A}));
    EXPECT_EQ(ldns_pkt_get_rcode(a.get()), LDNS_RCODE_NOERROR) << name;
    EXPECT_EQ(ldns_pkt_ancount(a.get()), 0) << name;
  }
  Pkt unknown = Parse(Ask({.name = "_nope._tcp.service.drover", .type = LDNS_RR_TYPE_SRV}));
  EXPECT_EQ(ldns_pkt_get_rcode(unknown.get()), LDNS_RCODE_NXDOMAIN);
}

TEST_F(DnsAnswerTest, AddressRecordsAreTheServingInstancesEachAddressOnce) {
  Pkt a = Parse(Ask({.name = "zone.service.drover", .type = LDNS_RR_TYPE_A}));
  EXPECT_EQ(Records(a.get(), LDNS_SECTION_ANSWER),
            (std::vector<std::string>{"A 10.0.0.1", "A 10.0.0.2"}));
  Pkt aaaa = Parse(Ask({.name = "zone.service.drover", .type = LDNS_RR_TYPE_AAAA}));
  EXPECT_EQ(Records(aaaa.get(), LDNS_SECTION_ANSWER), (std::vector<std::string>{"AAAA fd00::3"}));
}

TEST_F(DnsAnswerTest, AnInstanceNameAnswersItsAddressInAnyState) {
  Pkt ready = Parse(Ask({.name = "z1.zone.service.drover"}));
  EXPECT_EQ(Records(ready.get(), LDNS_SECTION_ANSWER), (std::vector<std::string>{"A 10.0.0.1"}));
  Pkt draining = Parse(Ask({.name = "z5.zone.service.drover"}));
  EXPECT_EQ(Records(draining.get(), LDNS_SECTION_ANSWER), (std::vector<std::string>{"A 10.0.0.5"}));
  Pkt missing = Parse(Ask({.name = "z9.zone.service.drover"}));
  EXPECT_EQ(ldns_pkt_get_rcode(missing.get()), LDNS_RCODE_NXDOMAIN);
}

TEST_F(DnsAnswerTest, NamesAreCaseBlindAndEchoedAsAsked) {
  catalog_.Add("Lobby", "L-1", "10.0.1.1:80");
  Pkt p = Parse(Ask({.name = "LOBBY.Service.DROVER", .type = LDNS_RR_TYPE_SRV}));
  ASSERT_EQ(ldns_pkt_ancount(p.get()), 1);
  char* owner = ldns_rdf2str(ldns_rr_owner(ldns_rr_list_rr(ldns_pkt_answer(p.get()), 0)));
  EXPECT_STREQ(owner, "LOBBY.Service.DROVER.");  // resolvers that randomise case check this
  LDNS_FREE(owner);
  Pkt instance = Parse(Ask({.name = "l-1.lobby.service.drover"}));
  EXPECT_EQ(Records(instance.get(), LDNS_SECTION_ANSWER), (std::vector<std::string>{"A 10.0.1.1"}));
}

TEST_F(DnsAnswerTest, ServiceAndInstanceNamesWithDotsResolve) {
  catalog_.Add("eu.zone", "a.1", "10.0.2.1:80");
  Pkt service = Parse(Ask({.name = "eu.zone.service.drover"}));
  EXPECT_EQ(Records(service.get(), LDNS_SECTION_ANSWER), (std::vector<std::string>{"A 10.0.2.1"}));
  Pkt instance = Parse(Ask({.name = "a.1.eu.zone.service.drover"}));
  EXPECT_EQ(Records(instance.get(), LDNS_SECTION_ANSWER), (std::vector<std::string>{"A 10.0.2.1"}));
}

TEST_F(DnsAnswerTest, AHostNameIsItsOwnSrvTargetAndHasNoAddressRecord) {
  catalog_.Add("named", "n1", "game-7.example.net:7000");
  Pkt srv = Parse(Ask({.name = "named.service.drover", .type = LDNS_RR_TYPE_SRV}));
  EXPECT_EQ(Records(srv.get(), LDNS_SECTION_ANSWER),
            (std::vector<std::string>{"SRV 0 1 7000 game-7.example.net."}));
  EXPECT_TRUE(Records(srv.get(), LDNS_SECTION_ADDITIONAL).empty());
  Pkt a = Parse(Ask({.name = "named.service.drover"}));
  EXPECT_EQ(ldns_pkt_ancount(a.get()), 0);
}

TEST_F(DnsAnswerTest, UnknownNamesAreNxdomainAndEmptyOnesNodataBothWithTheSoa) {
  for (const char* name : {"nope.service.drover", "x.drover", "z1.nope.service.drover"}) {
    Pkt p = Parse(Ask({.name = name}));
    EXPECT_EQ(ldns_pkt_get_rcode(p.get()), LDNS_RCODE_NXDOMAIN) << name;
    const auto authority = Records(p.get(), LDNS_SECTION_AUTHORITY);
    ASSERT_EQ(authority.size(), 1u) << name;
    EXPECT_EQ(authority[0], "SOA ns.drover. hostmaster.drover. 1 60 60 3600 1");
  }
  for (const char* name : {"drover", "service.drover"}) {
    Pkt p = Parse(Ask({.name = name}));
    EXPECT_EQ(ldns_pkt_get_rcode(p.get()), LDNS_RCODE_NOERROR) << name;
    EXPECT_EQ(ldns_pkt_ancount(p.get()), 0) << name;
    EXPECT_EQ(ldns_pkt_nscount(p.get()), 1) << name;
  }
  Pkt txt = Parse(Ask({.name = "zone.service.drover", .type = LDNS_RR_TYPE_TXT}));
  EXPECT_EQ(ldns_pkt_get_rcode(txt.get()), LDNS_RCODE_NOERROR);
  EXPECT_EQ(ldns_pkt_ancount(txt.get()), 0);
  Pkt soa = Parse(Ask({.name = "drover", .type = LDNS_RR_TYPE_SOA}));
  EXPECT_EQ(ldns_pkt_ancount(soa.get()), 1);
}

TEST_F(DnsAnswerTest, EverythingElseIsRefused) {
  const Query refused[] = {
      {.name = "example.com"},
      {.name = "zone.service.drover.example.com"},
      {.name = "zone.service.drover", .type = LDNS_RR_TYPE_ANY},
      {.name = "drover", .type = LDNS_RR_TYPE_AXFR},
      {.name = "drover", .type = LDNS_RR_TYPE_IXFR},
      {.name = "zone.service.drover", .klass = LDNS_RR_CLASS_CH},
  };
  for (const Query& q : refused) {
    const DnsReply reply = Ask(q);
    Pkt p = Parse(reply);
    EXPECT_EQ(ldns_pkt_get_rcode(p.get()), LDNS_RCODE_REFUSED) << q.name;
    EXPECT_EQ(ldns_pkt_ancount(p.get()), 0) << q.name;
    EXPECT_FALSE(ldns_pkt_aa(p.get())) << q.name;
  }
  Pkt notify = Parse(Ask({.name = "drover", .opcode = LDNS_PACKET_NOTIFY}));
  EXPECT_EQ(ldns_pkt_get_rcode(notify.get()), LDNS_RCODE_NOTIMPL);
  // An opcode no standard names (14) is refused the same way and echoed as it came.
  std::vector<std::uint8_t> odd = Wire({.name = "drover"});
  odd[2] = static_cast<std::uint8_t>((odd[2] & ~0x78) | (14 << 3));
  const DnsReply reply = AnswerDnsQuery(odd, DnsTransport::kUdp, zone_, catalog_);
  ASSERT_GE(reply.wire.size(), 12u);
  EXPECT_EQ((reply.wire[2] >> 3) & 0x0f, 14);
  EXPECT_EQ(reply.wire[3] & 0x0f, LDNS_RCODE_NOTIMPL);
}

TEST_F(DnsAnswerTest, MalformedMessagesGetFormerrAndResponsesAndScrapsNothing) {
  std::vector<std::uint8_t> query = Wire({.name = "zone.service.drover"});
  // Cut inside the question: the header parses, the rest does not.
  const std::vector<std::uint8_t> cut(query.begin(), query.begin() + 16);
  const DnsReply formerr = AnswerDnsQuery(cut, DnsTransport::kUdp, zone_, catalog_);
  Pkt p = Parse(formerr);
  EXPECT_EQ(ldns_pkt_get_rcode(p.get()), LDNS_RCODE_FORMERR);
  EXPECT_EQ(ldns_pkt_id(p.get()), 4242);
  EXPECT_EQ(ldns_pkt_qdcount(p.get()), 0);
  // Two questions.
  std::vector<std::uint8_t> two = query;
  two[5] = 2;
  two.insert(two.end(), query.begin() + 12, query.end());
  EXPECT_EQ(
      ldns_pkt_get_rcode(Parse(AnswerDnsQuery(two, DnsTransport::kUdp, zone_, catalog_)).get()),
      LDNS_RCODE_FORMERR);
  // A response (QR set) is never answered, nor is anything shorter than a header.
  std::vector<std::uint8_t> response = query;
  response[2] |= 0x80;
  EXPECT_TRUE(AnswerDnsQuery(response, DnsTransport::kUdp, zone_, catalog_).wire.empty());
  const std::vector<std::uint8_t> scrap(query.begin(), query.begin() + 5);
  EXPECT_TRUE(AnswerDnsQuery(scrap, DnsTransport::kUdp, zone_, catalog_).wire.empty());
}

TEST_F(DnsAnswerTest, UdpAnswersFitTheOfferedSizeAndTcpCarriesTheWholeList) {
  for (int i = 0; i < 120; ++i) {
    catalog_.Add("big", "b" + std::to_string(i), "10.1.0." + std::to_string(i + 1) + ":8000");
  }
  // No EDNS: 512 bytes, so the additional records go, then every record with TC.
  const DnsReply plain = Ask({.name = "big.service.drover", .type = LDNS_RR_TYPE_SRV});
  EXPECT_TRUE(plain.truncated);
  EXPECT_LE(plain.wire.size(), 512u);
  Pkt p = Parse(plain);
  EXPECT_TRUE(ldns_pkt_tc(p.get()));
  EXPECT_EQ(ldns_pkt_ancount(p.get()), 0);
  // EDNS offers 4096: we hold to 1232.
  const DnsReply edns =
      Ask({.name = "big.service.drover", .type = LDNS_RR_TYPE_SRV, .edns_size = 4096});
  EXPECT_TRUE(edns.truncated);
  EXPECT_LE(edns.wire.size(), 1232u);
  EXPECT_EQ(ldns_pkt_edns_udp_size(Parse(edns).get()), 1232);
  // A list that fits once its additional records are dropped is not truncated.
  const DnsReply addresses = Ask({.name = "big.service.drover", .edns_size = 4096});
  EXPECT_TRUE(addresses.truncated);  // 120 A records: ~1.9 KB
  // TCP: everything, additional records too.
  const DnsReply tcp =
      Ask({.name = "big.service.drover", .type = LDNS_RR_TYPE_SRV}, DnsTransport::kTcp);
  EXPECT_FALSE(tcp.truncated);
  Pkt whole = Parse(tcp);
  EXPECT_EQ(ldns_pkt_ancount(whole.get()), 120);
  EXPECT_EQ(ldns_pkt_arcount(whole.get()), 120);
}

TEST_F(DnsAnswerTest, SmallAnswersOverUdpShedAdditionalRecordsBeforeTruncating) {
  for (int i = 0; i < 10; ++i) {
    catalog_.Add("mid", "m" + std::to_string(i), "10.2.0." + std::to_string(i + 1) + ":8000");
  }
  // 10 SRV records fit 512 bytes; with their 10 A records they do not (SRV targets are never
  // compressed, RFC 2782).
  const DnsReply reply = Ask({.name = "mid.service.drover", .type = LDNS_RR_TYPE_SRV});
  EXPECT_FALSE(reply.truncated);
  Pkt p = Parse(reply);
  EXPECT_EQ(ldns_pkt_ancount(p.get()), 10);
  EXPECT_EQ(ldns_pkt_arcount(p.get()), 0);
}

TEST_F(DnsAnswerTest, AnAnswerOverWhatTcpCarriesIsCutWithTc) {
  for (int i = 0; i < 3000; ++i) {
    catalog_.Add("huge", "h" + std::to_string(i),
                 "10.3." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) + ":8000");
  }
  const DnsReply reply =
      Ask({.name = "huge.service.drover", .type = LDNS_RR_TYPE_SRV}, DnsTransport::kTcp);
  EXPECT_TRUE(reply.truncated);
  EXPECT_LE(reply.wire.size(), 65535u);
  EXPECT_GT(reply.answers, 1000u);
  Pkt p = Parse(reply);
  EXPECT_EQ(ldns_pkt_ancount(p.get()), reply.answers);
}

TEST_F(DnsAnswerTest, EdnsVersionsOtherThanZeroGetBadvers) {
  const DnsReply reply = Ask({.name = "zone.service.drover", .edns_size = 1232, .edns_version = 1});
  Pkt p = Parse(reply);
  EXPECT_EQ(ldns_pkt_edns_extended_rcode(p.get()), 1);  // BADVERS = 16: its upper bits
  EXPECT_EQ(ldns_pkt_ancount(p.get()), 0);
}

TEST_F(DnsAnswerTest, ZonesAreChecked) {
  EXPECT_TRUE(ValidateDnsZone({.domain = "drover"}).ok());
  EXPECT_TRUE(ValidateDnsZone({.domain = "fleet.example.internal", .ttl_s = 30}).ok());
  for (const char* bad : {"", ".drover", "drover.", "a..b", "-x", "x_y", "a b"}) {
    const Status s = ValidateDnsZone({.domain = bad});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--dns-domain"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(ValidateDnsZone({.domain = std::string(64, 'a')}).ok());
  EXPECT_FALSE(ValidateDnsZone({.ttl_s = 86'401}).ok());
}

}  // namespace
}  // namespace drover::registry
