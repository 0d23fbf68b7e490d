// Helpers that build endpoint lists and routing tables for router tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "drover/router.h"

namespace drover::testing {

inline router::Endpoint ReadyEndpoint(std::string id, std::uint32_t weight = 1) {
  router::Endpoint e;
  e.address = "127.0.0.1:" + std::to_string(20000 + id.size());
  e.id = std::move(id);
  e.weight = weight;
  e.state = router::EndpointState::kReady;
  return e;
}

inline std::vector<router::Endpoint> ReadyEndpoints(std::size_t n, std::size_t first = 0) {
  std::vector<router::Endpoint> out;
  for (std::size_t i = first; i < first + n; ++i) {
    out.push_back(ReadyEndpoint("node-" + std::to_string(i)));
  }
  return out;
}

inline std::shared_ptr<const router::RoutingTable> Table(std::vector<router::Endpoint> endpoints,
                                                         std::uint64_t version = 1) {
  return router::RoutingTable::Create(version, std::move(endpoints)).value();
}

inline std::vector<std::uint64_t> KeyHashes(std::size_t count, const std::string& prefix = "key-") {
  std::vector<std::uint64_t> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = router::HashKey(prefix + std::to_string(i));
  return out;
}

}  // namespace drover::testing
