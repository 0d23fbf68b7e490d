// Endpoints and the routing table: what the router routes to. An Endpoint is a plain value (an
// instance's id, address, weight, zone and state). A RoutingTable owns its endpoints and is
// immutable once created; it is shared through shared_ptr<const RoutingTable> and thread-safe to
// read from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::router {

enum class EndpointState : std::uint8_t { kStarting, kReady, kDraining };
std::string_view EndpointStateName(EndpointState state);

struct Endpoint {
  std::string id;            // unique within a table; the identity that hashing uses
  std::string address;       // "host:port"
  std::uint32_t weight = 1;  // relative capacity; 0 takes no traffic
  std::string zone;
  EndpointState state = EndpointState::kStarting;
  bool accepting = true;  // "zone full" and similar: READY but wants no new work
  // When it last became READY; unset means READY since before this process learned of it, and
  // then no slow start applies.
  std::optional<MonoTime> ready_since;
  std::uint64_t generation = 0;
  // "host:port" of the instance's HTTP /ready probe, when it publishes one (label
  // drover.health); gateways check it actively.
  std::string health;

  // May own keys (member of the ring / Maglev table).
  bool KeyEligible() const { return state == EndpointState::kReady && weight > 0; }
  // May receive new connections and new keys right now.
  bool Routable() const { return KeyEligible() && accepting; }

  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// An immutable, versioned set of endpoints, sorted by id so that equal sets give equal tables.
// Thread-safe to read from any number of threads.
class RoutingTable {
 public:
  // Fails with INVALID_ARGUMENT on an empty or duplicate id. An empty endpoint list is valid
  // (a table can be empty); picking on it fails cleanly.
  static Result<std::shared_ptr<const RoutingTable>> Create(std::uint64_t version,
                                                            std::vector<Endpoint> endpoints);

  std::uint64_t version() const { return version_; }
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }
  std::size_t size() const { return endpoints_.size(); }
  const Endpoint& at(std::size_t index) const { return endpoints_.at(index); }
  std::optional<std::size_t> IndexOf(std::string_view id) const;

 private:
  RoutingTable(std::uint64_t version, std::vector<Endpoint> endpoints)
      : version_(version), endpoints_(std::move(endpoints)) {}

  std::uint64_t version_;
  std::vector<Endpoint> endpoints_;
};

}  // namespace drover::router
