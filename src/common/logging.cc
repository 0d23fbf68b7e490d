#include "common/logging.h"

#include <spdlog/formatter.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <memory>
#include <utility>

namespace drover::logging {
namespace {

constexpr std::array<std::string_view, 7> kLevelNames = {"trace", "debug",    "info", "warn",
                                                         "error", "critical", "off"};

spdlog::level::level_enum ToSpdlog(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kCritical:
      return spdlog::level::critical;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

Level FromSpdlog(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return Level::kTrace;
    case spdlog::level::debug:
      return Level::kDebug;
    case spdlog::level::info:
      return Level::kInfo;
    case spdlog::level::warn:
      return Level::kWarn;
    case spdlog::level::err:
      return Level::kError;
    case spdlog::level::critical:
      return Level::kCritical;
    default:
      return Level::kOff;
  }
}

// The line builders are templates so that the spdlog formatter writes straight into spdlog's
// buffer while the public Format* functions produce a std::string from the same code.
template <typename Buffer>
void Append(Buffer& out, std::string_view text) {
  out.append(text.data(), text.data() + text.size());
}

template <typename Buffer>
void AppendTimestamp(Buffer& out, std::chrono::system_clock::time_point time) {
  using namespace std::chrono;  // NOLINT(google-build-using-namespace): calendar types
  const auto ms = floor<milliseconds>(time);
  const auto day = floor<days>(ms);
  const year_month_day date(day);
  const hh_mm_ss clock(ms - day);
  std::array<char, 48> buf;
  const int n = std::snprintf(
      buf.data(), buf.size(), "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ", static_cast<int>(date.year()),
      static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
      static_cast<int>(clock.hours().count()), static_cast<int>(clock.minutes().count()),
      static_cast<int>(clock.seconds().count()), static_cast<int>(clock.subseconds().count()));
  if (n > 0) Append(out, std::string_view(buf.data(), static_cast<std::size_t>(n)));
}

// Length of the well-formed UTF-8 sequence starting at text[i] (Unicode table 3-7: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 when it is not one.
std::size_t Utf8SequenceLength(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  unsigned char second_lo = 0x80;
  unsigned char second_hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_lo = 0xA0;
    if (lead == 0xED) second_hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_lo = 0x90;
    if (lead == 0xF4) second_hi = 0x8F;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < second_lo || byte(i + 1) > second_hi) return 0;
  for (std::size_t k = i + 2; k < i + length; ++k) {
    if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
  }
  return length;
}

// A JSON string literal (RFC 8259) holding `text`, with every byte that is not part of a
// well-formed UTF-8 sequence replaced by U+FFFD so that the line stays valid JSON.
template <typename Buffer>
void AppendJsonString(Buffer& out, std::string_view text) {
  static constexpr std::string_view kHex = "0123456789abcdef";
  out.push_back('"');
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          Append(out, "\\\"");
          break;
        case '\\':
          Append(out, "\\\\");
          break;
        case '\n':
          Append(out, "\\n");
          break;
        case '\r':
          Append(out, "\\r");
          break;
        case '\t':
          Append(out, "\\t");
          break;
        case '\b':
          Append(out, "\\b");
          break;
        case '\f':
          Append(out, "\\f");
          break;
        default:
          if (c < 0x20) {
            Append(out, "\\u00");
            out.push_back(kHex[c >> 4]);
            out.push_back(kHex[c & 0xF]);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    const std::size_t length = Utf8SequenceLength(text, i);
    if (length == 0) {
      Append(out, "\\ufffd");
      ++i;
    } else {
      Append(out, text.substr(i, length));
      i += length;
    }
  }
  out.push_back('"');
}

template <typename Buffer>
void AppendTextLine(Buffer& out, const LogRecord& record) {
  AppendTimestamp(out, record.time);
  out.push_back(' ');
  Append(out, LevelName(record.level));
  Append(out, " [");
  Append(out, record.logger_name);
  Append(out, "] ");
  Append(out, record.message);
  out.push_back('\n');
}

template <typename Buffer>
void AppendJsonLine(Buffer& out, const LogRecord& record) {
  Append(out, "{\"ts\":\"");
  AppendTimestamp(out, record.time);
  Append(out, "\",\"level\":\"");
  Append(out, LevelName(record.level));
  Append(out, "\",\"logger\":");
  AppendJsonString(out, record.logger_name);
  Append(out, ",\"msg\":");
  AppendJsonString(out, record.message);
  Append(out, "}\n");
}

// spdlog's pattern language cannot JSON-escape a message, so both formats are a formatter of our
// own; spdlog clones it into every sink. Stateless, hence safe on any thread.
class LineFormatter final : public spdlog::formatter {
 public:
  explicit LineFormatter(bool json) : json_(json) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const LogRecord record{
        .time = msg.time,
        .level = FromSpdlog(msg.level),
        .logger_name = std::string_view(msg.logger_name.data(), msg.logger_name.size()),
        .message = std::string_view(msg.payload.data(), msg.payload.size()),
    };
    if (json_) {
      AppendJsonLine(dest, record);
    } else {
      AppendTextLine(dest, record);
    }
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(json_);
  }

 private:
  const bool json_;
};

}  // namespace

Result<Level> ParseLevel(std::string_view name) {
  for (std::size_t i = 0; i < kLevelNames.size(); ++i) {
    if (name == kLevelNames[i]) return static_cast<Level>(i);
  }
  std::string message = "unknown log level \"" + std::string(name) + "\"; valid levels are ";
  for (std::size_t i = 0; i < kLevelNames.size(); ++i) {
    if (i > 0) message += ", ";
    message += kLevelNames[i];
  }
  return InvalidArgumentError(std::move(message));
}

std::string_view LevelName(Level level) {
  const auto index = static_cast<std::size_t>(level);
  return index < kLevelNames.size() ? kLevelNames[index] : std::string_view("unknown");
}

Status Setup(const LogOptions& options) {
  DROVER_ASSIGN_OR_RETURN(const Level level, ParseLevel(options.level));
  // spdlog reports failures (e.g. allocation) by exception; none may cross this boundary.
  try {
    auto logger = std::make_shared<spdlog::logger>(
        "drover", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    spdlog::set_default_logger(std::move(logger));
    // Registry-wide, so that loggers other code registered keep the same format and level.
    spdlog::set_formatter(std::make_unique<LineFormatter>(options.json));
    spdlog::set_level(ToSpdlog(level));
  } catch (const std::exception& e) {
    return InternalError(std::string("log setup failed: ") + e.what());
  }
  return Status::Ok();
}

Level CurrentLevel() {
  const spdlog::logger* logger = spdlog::default_logger_raw();
  return logger == nullptr ? Level::kOff : FromSpdlog(logger->level());
}

std::string FormatTimestamp(std::chrono::system_clock::time_point time) {
  std::string out;
  AppendTimestamp(out, time);
  return out;
}

std::string FormatTextLine(const LogRecord& record) {
  std::string out;
  AppendTextLine(out, record);
  return out;
}

std::string FormatJsonLine(const LogRecord& record) {
  std::string out;
  AppendJsonLine(out, record);
  return out;
}

}  // namespace drover::logging
