// Fencing errors: the registry refuses a write whose generation is not newer than the newest
// generation it has seen for that instance id, live or in a tombstone. The refusal is ABORTED with
// a message that starts "fenced:" and names that newest generation, so that a client can pick a
// generation above it (a host restarted after the wall clock stepped back does exactly that).
// The format is part of the API: "fenced: <service>/<id> generation <G> is stale: newest
// generation <N> (<why>)".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "drover/status.h"

namespace drover {

Status FencedError(const std::string& service, const std::string& id, std::uint64_t generation,
                   std::uint64_t newest, const std::string& why);

// True for a fencing error, also with context prefixed by Status::WithContext.
bool IsFenced(const Status& status);

// The newest generation a fencing error names; nullopt for any other status.
std::optional<std::uint64_t> FencedNewestGeneration(const Status& status);

}  // namespace drover
