// The registry's HTTP request bodies and query strings: strict JSON parsing into an instance
// spec, its validation, the small bodies of state and heartbeat writes, and query parsing; and an
// instance as the etcd store keeps it (a value any process with access to etcd may have written).
// Any input must end in a value or an INVALID_ARGUMENT, never a crash, a throw or a hang; a stored
// value that reads must write back to text that reads as the same instance and writes the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/text.h"
#include "drover/status.h"
#include "registry/json_codec.h"
#include "registry/model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace reg = drover::registry;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const reg::Limits limits;
  if (auto spec = reg::SpecFromJson(input); spec.ok()) {
    (void)reg::ValidateSpec(*spec, limits);
  }
  if (auto body = reg::ParseObject(input, {"generation", "state", "accepting"}); body.ok()) {
    (void)reg::GetUint(*body, "generation", true);
    if (auto state = reg::GetString(*body, "state", false); state.ok()) {
      (void)reg::ParseInstanceState(*state);
    }
    (void)reg::GetBool(*body, "accepting", false);
  }
  for (const auto& [name, value] : drover::ParseQuery(input)) {
    (void)reg::ValidateName("query", value, limits);
  }
  (void)reg::ValidateName("service", input, limits);

  if (auto stored = reg::StoredInstanceFromJson(input); stored.ok()) {
    const std::string text =
        reg::StoredInstanceJson(stored->spec, stored->create_revision, stored->ready_since_ms);
    auto again = reg::StoredInstanceFromJson(text);
    if (!again.ok() || again->spec != stored->spec ||
        again->create_revision != stored->create_revision ||
        again->ready_since_ms != stored->ready_since_ms) {
      std::abort();  // what the registry writes, it cannot read back as written
    }
    if (reg::StoredInstanceJson(again->spec, again->create_revision, again->ready_since_ms) !=
        text) {
      std::abort();  // one instance, two texts
    }
  } else if (stored.status().code() != drover::StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
