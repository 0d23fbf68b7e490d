// The registry's xDS request handling (registry/xds_resources.h): protobuf's decoding of what a
// client sends on an ADS stream, then the stream's protocol -- subscriptions, ACKs, NACKs, stale
// nonces -- against snapshots that change between requests. The input is a sequence of requests,
// each prefixed by its length (2 bytes, big-endian). Any input must end in responses or nothing,
// never a crash, a leak or a hang; a stream must not answer one request with more than one
// response per resource type.
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "envoy/service/discovery/v3/ads.pb.h"
#include "registry/xds_resources.h"

namespace {

namespace reg = drover::registry;

std::shared_ptr<const reg::XdsSnapshot> Snapshot(std::uint64_t version) {
  auto s = std::make_shared<reg::XdsSnapshot>();
  s->version = version;
  for (const char* service : {"whoami", "zone", "eu.zone"}) {
    std::vector<reg::Instance> instances;
    for (std::uint64_t i = 0; i < 3 + version % 3; ++i) {
      reg::Instance in;
      in.service = service;
      in.id = "i" + std::to_string(i);
      in.spec.address =
          "10.0." + std::to_string(version % 7) + "." + std::to_string(i + 1) + ":50051";
      in.spec.state = static_cast<reg::InstanceState>((i + version) % 3);
      in.spec.zone = i % 2 == 0 ? "a" : "b";
      in.spec.weight = static_cast<std::uint32_t>(i * 1000);
      instances.push_back(in);
    }
    s->services[service] = std::make_shared<const reg::XdsServiceResources>(
        reg::BuildXdsResources(service, instances));
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {  // a NACK or an unknown type is logged: not per input here
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  static const auto first = Snapshot(1);
  static const auto second = Snapshot(2);
  reg::XdsSession session("fuzz");
  session.OnSnapshot(first);
  std::size_t at = 0;
  int requests = 0;
  while (at + 2 <= size && requests < 64) {
    const std::size_t length = static_cast<std::size_t>(data[at] << 8 | data[at + 1]);
    at += 2;
    const std::size_t take = std::min(length, size - at);
    envoy::service::discovery::v3::DiscoveryRequest request;
    if (request.ParseFromArray(data + at, static_cast<int>(take))) {
      session.OnRequest(request);
      int responses = 0;
      while (session.Next()) {
        if (++responses > 4) std::abort();  // one per type at most
      }
    }
    at += take;
    session.OnSnapshot(++requests % 2 == 0 ? first : second);
  }
  return 0;
}
