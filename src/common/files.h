// Files that must never be seen half written.
#pragma once

#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover {

// Writes `content` to `path` through `<path>.tmp`, fsync and rename: after a crash the file
// holds the old content or the new, never a mix. UNAVAILABLE with the reason otherwise.
Status WriteFileAtomically(const std::string& path, std::string_view content);

}  // namespace drover
