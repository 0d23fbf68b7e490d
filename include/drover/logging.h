// Process-wide log setup: level and line format of spdlog's default logger.
//
// Every Drover binary calls Setup() once at startup, before it starts threads; spdlog's own
// logging calls are thread-safe afterwards, but Setup() replaces the default logger and must not
// race with them (spdlog's documented restriction on set_default_logger). Logs go to stderr, one
// record per line:
//
//   text: 2025-01-02T03:04:05.678Z info [drover] listening on 127.0.0.1:7070
//   json: {"ts":"2025-01-02T03:04:05.678Z","level":"info","logger":"drover","msg":"listening ..."}
//
// Timestamps are UTC with milliseconds. In JSON mode the message is JSON-escaped (quotes,
// backslashes, control characters, invalid UTF-8), so every line is one valid JSON object that a
// log shipper can parse without guessing. Text mode writes the message verbatim, for humans.
//
// spdlog owns the installed logger; nothing here holds state of its own. spdlog stays out of this
// header so that only drover_common depends on it.
#pragma once

#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover::logging {

// Severity, least to most severe; kOff disables logging. Same order as spdlog's levels.
enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kCritical, kOff };

struct LogOptions {
  std::string level = "info";  // one of the names ParseLevel accepts
  bool json = false;           // one JSON object per line instead of human-readable text
};

// "trace", "debug", "info", "warn", "error", "critical" or "off"; INVALID_ARGUMENT listing those
// names for anything else (matching is exact: flags and config files spell them in lower case).
Result<Level> ParseLevel(std::string_view name);
// The name ParseLevel accepts for `level`.
std::string_view LevelName(Level level);

// Installs a stderr logger named "drover" as spdlog's default logger, with `options.level` and
// the text or JSON line format, and applies the level and format to every logger already
// registered with spdlog. Fails with INVALID_ARGUMENT (and changes nothing) on an unknown level.
// Not thread-safe: call once at startup, before any thread logs.
Status Setup(const LogOptions& options);

// The level of spdlog's default logger (kInfo until Setup() changes it).
Level CurrentLevel();

}  // namespace drover::logging
