#include "common/logging.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace drover::logging {
namespace {

using std::chrono::system_clock;

// 2025-01-02T03:04:05.678999Z: the microseconds check that milliseconds are truncated.
system_clock::time_point SampleTime() {
  using namespace std::chrono;  // NOLINT(google-build-using-namespace): calendar literals
  return sys_days{2025y / January / 2} + 3h + 4min + 5s + 678ms + 999us;
}

// Restores the process-wide logger state every test here may change. Inside a fixture, Setup
// must be qualified: testing::Test declares a private Setup() that would hide it.
class LoggingTest : public ::testing::Test {
 protected:
  void TearDown() override { ASSERT_TRUE(logging::Setup(LogOptions{}).ok()); }
};

TEST(ParseLevelTest, AcceptsEveryDocumentedName) {
  const std::pair<const char*, Level> cases[] = {
      {"trace", Level::kTrace}, {"debug", Level::kDebug}, {"info", Level::kInfo},
      {"warn", Level::kWarn},   {"error", Level::kError}, {"critical", Level::kCritical},
      {"off", Level::kOff},
  };
  for (const auto& [name, level] : cases) {
    const Result<Level> parsed = ParseLevel(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, level) << name;
    EXPECT_EQ(LevelName(level), name);
  }
}

TEST(ParseLevelTest, RejectsUnknownNamesListingValidOnes) {
  for (const char* bad : {"verbose", "", "INFO", "warning", "info "}) {
    const Result<Level> parsed = ParseLevel(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("trace, debug, info, warn, error, critical, off"),
              std::string::npos)
        << parsed.status().message();
  }
}

TEST_F(LoggingTest, SetupRejectsBadLevelAndChangesNothing) {
  ASSERT_TRUE(logging::Setup({.level = "debug"}).ok());
  const Status status = logging::Setup({.level = "loud", .json = true});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("loud"), std::string::npos);
  EXPECT_EQ(CurrentLevel(), Level::kDebug);
}

TEST_F(LoggingTest, SetupAppliesEveryValidLevel) {
  for (const Level level : {Level::kTrace, Level::kDebug, Level::kInfo, Level::kWarn, Level::kError,
                            Level::kCritical, Level::kOff}) {
    for (const bool json : {false, true}) {
      const Status status = logging::Setup({.level = std::string(LevelName(level)), .json = json});
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(CurrentLevel(), level);
    }
  }
}

TEST(FormatTest, TimestampIsIsoUtcWithTruncatedMilliseconds) {
  EXPECT_EQ(FormatTimestamp(SampleTime()), "2025-01-02T03:04:05.678Z");
  EXPECT_EQ(FormatTimestamp(system_clock::time_point{}), "1970-01-01T00:00:00.000Z");
  // Before the epoch the millisecond still rounds down, into the previous second and day.
  EXPECT_EQ(FormatTimestamp(system_clock::time_point{} - std::chrono::microseconds(1)),
            "1969-12-31T23:59:59.999Z");
}

TEST(FormatTest, TextLine) {
  const LogRecord record{.time = SampleTime(),
                         .level = Level::kWarn,
                         .logger_name = "drover",
                         .message = "listening on 127.0.0.1:7070"};
  EXPECT_EQ(FormatTextLine(record),
            "2025-01-02T03:04:05.678Z warn [drover] listening on 127.0.0.1:7070\n");
}

TEST(FormatTest, JsonLineExact) {
  const LogRecord record{.time = SampleTime(),
                         .level = Level::kError,
                         .logger_name = "drover",
                         .message = "say \"hi\"\nback\\slash\ttab"};
  EXPECT_EQ(FormatJsonLine(record),
            "{\"ts\":\"2025-01-02T03:04:05.678Z\",\"level\":\"error\",\"logger\":\"drover\","
            "\"msg\":\"say \\\"hi\\\"\\nback\\\\slash\\ttab\"}\n");
}

TEST(FormatTest, JsonLineIsOneValidObjectThatRoundTripsTheMessage) {
  const std::string message =
      std::string("quote \" backslash \\ newline \n cr \r nul ") + '\0' +
      " bell \x07 del \x7f unicode \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 end";
  const LogRecord record{
      .time = SampleTime(), .level = Level::kInfo, .logger_name = "re\"g", .message = message};
  const std::string line = FormatJsonLine(record);
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "must be a single line: " << line;
  const nlohmann::json parsed = nlohmann::json::parse(line);  // throws (fails) if invalid
  ASSERT_TRUE(parsed.is_object());
  EXPECT_EQ(parsed.size(), 4u);
  EXPECT_EQ(parsed["ts"], "2025-01-02T03:04:05.678Z");
  EXPECT_EQ(parsed["level"], "info");
  EXPECT_EQ(parsed["logger"], "re\"g");
  EXPECT_EQ(parsed["msg"].get<std::string>(), message);
}

TEST(FormatTest, JsonLineReplacesInvalidUtf8) {
  const std::string replacement = "\xef\xbf\xbd";  // U+FFFD
  const struct {
    std::string input;
    std::string expected;
  } cases[] = {
      {"a\xff"
       "b",
       "a" + replacement + "b"},                                                    // never valid
      {"\xc0\xaf", replacement + replacement},                                      // overlong '/'
      {"\xed\xa0\x80", replacement + replacement + replacement},                    // surrogate
      {"\xe2\x82", replacement + replacement},                                      // truncated
      {"\xf4\x90\x80\x80", replacement + replacement + replacement + replacement},  // > U+10FFFF
      {"ok \xe2\x82\xac", "ok \xe2\x82\xac"},                                       // valid stays
  };
  for (const auto& c : cases) {
    const std::string line = FormatJsonLine(
        {.time = SampleTime(), .level = Level::kInfo, .logger_name = "drover", .message = c.input});
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(line)) << line;
    EXPECT_EQ(parsed["msg"].get<std::string>(), c.expected) << line;
  }
}

}  // namespace
}  // namespace drover::logging
