// The registry's data model (REG-1): services, instances, tombstones and watch events, plus the
// validation every write passes before it reaches the rules. Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::registry {

// Sticky process/operator intent. A heartbeat never changes it.
enum class InstanceState : std::uint8_t { kStarting = 0, kReady = 1, kDraining = 2 };
std::string_view InstanceStateName(InstanceState state);  // "STARTING", "READY", "DRAINING"
Result<InstanceState> ParseInstanceState(std::string_view name);

// What a client writes when it registers (or re-registers) an instance.
struct InstanceSpec {
  std::string address;           // "host:port"
  std::uint64_t generation = 0;  // incarnation; every write carries it (REG-2)
  InstanceState state = InstanceState::kStarting;
  std::int64_t ttl_ms = 10'000;  // lease
  std::uint32_t weight = 1;
  std::string zone;
  std::map<std::string, std::string> labels;
  std::string version;
  bool accepting = true;

  friend bool operator==(const InstanceSpec&, const InstanceSpec&) = default;
};

// A registered instance as the registry stores and reports it.
struct Instance {
  std::string service;
  std::string id;
  InstanceSpec spec;
  std::uint64_t create_revision = 0;  // revision of the registration that created this incarnation
  std::uint64_t mod_revision = 0;     // revision of the last change
  SystemTime ready_since{};           // when it last became READY (zero if never)

  // Whether clients that route by themselves (DNS, xDS, Prometheus discovery) are sent to it:
  // READY and accepting new connections -- what a gateway routes to.
  bool Serving() const { return spec.state == InstanceState::kReady && spec.accepting; }

  friend bool operator==(const Instance&, const Instance&) = default;
};

// Left behind by a deregistration or expiry, so that a late write of the same (or an older)
// generation cannot resurrect the instance (REG-2). Kept for at least one TTL.
struct Tombstone {
  std::string service;
  std::string id;
  std::uint64_t generation = 0;
  std::uint64_t revision = 0;
  SystemTime expires_at{};

  friend bool operator==(const Tombstone&, const Tombstone&) = default;
};

// Why an instance left (REG-3).
enum class RemovalReason : std::uint8_t { kTtl = 0, kDeregister = 1, kDrain = 2, kFence = 3 };
std::string_view RemovalReasonName(RemovalReason reason);  // "ttl", "deregister", "drain", "fence"

enum class EventType : std::uint8_t {
  kPut = 0,       // instance created or changed
  kDelete = 1,    // instance removed; `reason` says why
  kResync = 2,    // the watcher's revision is gone: `snapshot` holds the full state at `revision`
  kProgress = 3,  // nothing changed for the watcher; the registry is at `revision`
};
std::string_view EventTypeName(EventType type);

struct Event {
  EventType type = EventType::kPut;
  std::uint64_t revision = 0;
  Instance instance;                           // kPut: the new value; kDelete: the last value
  RemovalReason reason = RemovalReason::kTtl;  // kDelete only
  std::vector<Instance> snapshot;              // kResync only
  bool degraded = false;  // kResync/kProgress: some service is in self-preservation

  friend bool operator==(const Event&, const Event&) = default;
};

// Limits on what a client may write; anything outside is INVALID_ARGUMENT and changes nothing.
struct Limits {
  std::size_t max_name = 128;  // service and instance id
  std::size_t max_address = 256;
  std::size_t max_labels = 32;
  std::size_t max_label_key = 63;
  std::size_t max_label_value = 256;
  std::size_t max_version = 128;
  std::size_t max_zone = 64;
  std::int64_t min_ttl_ms = 1'000;
  std::int64_t max_ttl_ms = 3'600'000;
  std::uint32_t max_weight = 1'000'000;
};

// Service names and instance ids: 1..max_name of [A-Za-z0-9._-], not starting with '.' or '-'.
Status ValidateName(std::string_view what, std::string_view name, const Limits& limits);
// Address "host:port" (port 1..65535), lengths and charsets of every field, TTL and weight ranges.
Status ValidateSpec(const InstanceSpec& spec, const Limits& limits);

}  // namespace drover::registry
