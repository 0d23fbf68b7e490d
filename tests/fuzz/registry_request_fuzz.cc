// The registry's HTTP request bodies and query strings: strict JSON parsing into an instance
// spec, its validation, the small bodies of state and heartbeat writes, and query parsing. Any
// input must end in a value or an INVALID_ARGUMENT, never a crash, a throw or a hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/text.h"
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
  return 0;
}
