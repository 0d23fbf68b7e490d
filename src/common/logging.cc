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

#include "common/json_text.h"

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
