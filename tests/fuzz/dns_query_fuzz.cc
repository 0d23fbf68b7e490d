// The registry's DNS query handling (registry/dns_answer.h): ldns's decoding of whatever arrives
// on the DNS port, the name matching, and the encoding and fitting of the reply, over UDP and TCP.
// Any input must end in a reply or in nothing, never a crash, a leak or a hang; a reply must be
// within its transport's size and carry the query's id.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "registry/dns_answer.h"

namespace {

class Catalog final : public drover::registry::DnsCatalog {
 public:
  Catalog() {
    namespace reg = drover::registry;
    for (int i = 0; i < 40; ++i) {
      reg::Instance instance;
      instance.service = i < 30 ? "zone" : "eu.zone";
      instance.id = "z" + std::to_string(i);
      instance.spec.address = i % 3 == 0   ? "[fd00::" + std::to_string(i + 1) + "]:9000"
                              : i % 3 == 1 ? "10.0.0." + std::to_string(i + 1) + ":9000"
                                           : "host-" + std::to_string(i) + ".example:9000";
      instance.spec.state = static_cast<reg::InstanceState>(i % 3);
      instance.spec.weight = static_cast<std::uint32_t>(i * 4000);
      (i < 30 ? zone_ : eu_).push_back(instance);
    }
  }
  std::optional<std::vector<drover::registry::Instance>> Instances(
      std::string_view service) const override {
    if (service == "zone") return zone_;
    if (service == "eu.zone") return eu_;
    return std::nullopt;
  }

 private:
  std::vector<drover::registry::Instance> zone_;
  std::vector<drover::registry::Instance> eu_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace reg = drover::registry;
  static const Catalog catalog;
  static const reg::DnsZone zone;
  const std::span<const std::uint8_t> query(data, size);
  for (auto transport : {reg::DnsTransport::kUdp, reg::DnsTransport::kTcp}) {
    const reg::DnsReply reply = reg::AnswerDnsQuery(query, transport, zone, catalog);
    if (reply.wire.empty()) continue;
    const std::size_t limit = transport == reg::DnsTransport::kUdp ? 1232 : 65535;
    if (reply.wire.size() > limit || reply.wire.size() < 12 || reply.wire[0] != data[0] ||
        reply.wire[1] != data[1]) {
      std::abort();
    }
  }
  return 0;
}
