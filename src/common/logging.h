// The line formatters behind the log setup of drover/logging.h (its public API: Level,
// LogOptions, ParseLevel, LevelName, Setup, CurrentLevel), for the implementation and its tests.
//
// FormatTextLine and FormatJsonLine are the exact functions the installed formatter calls,
// exposed so that the format is testable without capturing stderr. Pure functions: a LogRecord
// only borrows its strings, and the formatted line is the caller's; thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "drover/logging.h"

namespace drover::logging {

// One log record, as the formatters see it. Views must outlive the Format call only.
struct LogRecord {
  std::chrono::system_clock::time_point time;
  Level level = Level::kInfo;
  std::string_view logger_name;
  std::string_view message;
};

// "2025-01-02T03:04:05.678Z": ISO-8601, UTC, milliseconds (truncated, not rounded).
std::string FormatTimestamp(std::chrono::system_clock::time_point time);

// `<timestamp> <level> [<logger>] <message>\n`; the message verbatim.
std::string FormatTextLine(const LogRecord& record);

// `{"ts":"<timestamp>","level":"<level>","logger":"<logger>","msg":"<message>"}\n`: one JSON
// object on one line. Strings are JSON-escaped; bytes that are not valid UTF-8 become U+FFFD.
std::string FormatJsonLine(const LogRecord& record);

}  // namespace drover::logging
