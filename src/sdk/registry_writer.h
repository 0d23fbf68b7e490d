// RegistryWriter: the registry calls a ServerHost makes about its own instance. The seam lets the
// host's life-cycle logic run against the real registry over gRPC (GrpcRegistryWriter) and
// against a scripted fake in unit tests (including under ThreadSanitizer, which gRPC defeats).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::sdk {

struct InstanceKey {
  std::string service;
  std::string id;
  std::uint64_t generation = 0;
};

struct Registration {
  InstanceKey key;
  std::string address;
  Duration ttl{};
  std::uint32_t weight = 1;
  std::string zone;
  std::string version;
  std::map<std::string, std::string> labels;
  bool accepting = true;
};

enum class InstancePhase { kStarting, kReady, kDraining };

// Implementations are thread-safe. Every call is bounded by `timeout`.
class RegistryWriter {
 public:
  virtual ~RegistryWriter() = default;
  // Registers the instance READY.
  virtual Status Register(const Registration& registration, Duration timeout) = 0;
  virtual Status Heartbeat(const InstanceKey& key, Duration timeout) = 0;
  virtual Status SetState(const InstanceKey& key, std::optional<InstancePhase> phase,
                          std::optional<bool> accepting, Duration timeout) = 0;
  virtual Status Deregister(const InstanceKey& key, Duration timeout) = 0;
  // The generation the registry holds for the instance now; 0 when it holds none.
  virtual Result<std::uint64_t> CurrentGeneration(const std::string& service, const std::string& id,
                                                  Duration timeout) = 0;
  // Fails the calls in flight at once (CANCELLED), and every later call too: shutdown.
  virtual void Cancel() = 0;
};

}  // namespace drover::sdk
