// The dashboard's static files (web/ at the top of the source tree), compiled into the binary by
// cmake/embed_web.cmake, so `drover registry` serves them whatever its working directory.
// Immutable data: safe to read from any thread.
#pragma once

#include <span>
#include <string_view>

namespace drover::registry {

struct WebAsset {
  std::string_view name;  // the file's name under web/, e.g. "app.js"
  std::string_view body;  // its bytes
  std::string_view etag;  // a quoted strong validator: the start of the file's SHA-256
};

// Every embedded file, sorted by name; valid for the life of the process.
std::span<const WebAsset> WebAssets();

}  // namespace drover::registry
