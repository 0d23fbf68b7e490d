// The result contract (JOB-4), the read classification (JOB-3) and the sanitizer (JOB-9) as
// tables: every stored payload is done, a step error or a protocol error -- never "not ready",
// never success by default.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "drover/jobs.h"

namespace drover::jobs {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Kind = Parsed::Kind;

struct PayloadCase {
  const char* name;
  std::string payload;
  Kind want;
  const char* detail;  // in the problem (protocol error), message or content
};

TEST(JobsPayloadTest, EveryPayloadIsClassifiedByTheAllowList) {
  const std::vector<PayloadCase> cases = {
      {"done", R"({"status":"done","content":"42"})", Kind::kDone, "42"},
      {"done without content", R"({"status":"done"})", Kind::kDone, ""},
      {"done, unknown members ignored", R"({"status":"done","content":"x","extra":[1]})",
       Kind::kDone, "x"},
      {"error", R"({"status":"error","retryable":true,"message":"no GPU"})", Kind::kStepError,
       "no GPU"},
      {"error without message", R"({"status":"error"})", Kind::kStepError, ""},
      {"empty object", "{}", Kind::kProtocolError, "no \"status\""},
      {"status a number", R"({"status":1})", Kind::kProtocolError, "is a number, not a string"},
      {"status null", R"({"status":null})", Kind::kProtocolError, "is null, not a string"},
      {"status unknown", R"({"status":"weird"})", Kind::kProtocolError,
       "neither \"done\" nor \"error\""},
      {"status in other case", R"({"status":"DONE"})", Kind::kProtocolError,
       "neither \"done\" nor \"error\""},
      {"status ok (not ours)", R"({"status":"ok"})", Kind::kProtocolError, "neither"},
      {"truncated JSON", R"({"status":"do)", Kind::kProtocolError, "not valid JSON"},
      {"empty value", "", Kind::kProtocolError, "not valid JSON"},
      {"binary junk", std::string("\x00\xff\x13\x37junk", 8), Kind::kProtocolError,
       "not valid JSON"},
      {"array", R"(["done"])", Kind::kProtocolError, "is an array, not an object"},
      {"bare string", R"("done")", Kind::kProtocolError, "is a string, not an object"},
      {"retryable a string", R"({"status":"error","retryable":"yes"})", Kind::kProtocolError,
       "\"retryable\" is a string"},
      {"message an object", R"({"status":"error","message":{"a":1}})", Kind::kProtocolError,
       "\"message\" is an object"},
      {"content a number", R"({"status":"done","content":7})", Kind::kProtocolError,
       "\"content\" is a number"},
      {"invalid UTF-8 in a string", "{\"status\":\"done\",\"content\":\"\xc3\x28\"}",
       Kind::kProtocolError, "not valid JSON"},
      {"huge value", R"({"status":"done","content":")" + std::string(kMaxPayloadBytes, 'x') + "\"}",
       Kind::kProtocolError, "-byte limit"},
  };
  ASSERT_GE(cases.size(), 15u);
  for (const PayloadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Parsed p = ParseStepResult(c.payload);
    EXPECT_EQ(static_cast<int>(p.kind), static_cast<int>(c.want)) << p.problem;
    switch (c.want) {
      case Kind::kDone:
        EXPECT_EQ(p.result.content, c.detail);
        break;
      case Kind::kStepError:
        EXPECT_EQ(p.result.message, c.detail);
        break;
      case Kind::kProtocolError:
        EXPECT_THAT(p.problem, HasSubstr(c.detail));
        EXPECT_LT(p.problem.size(), 120u);  // a description, never the payload itself
        break;
    }
    // Whatever it says, a stored value ends the wait.
    EXPECT_EQ(Classify(std::optional<std::string>(c.payload)), ReadClass::kTerminal);
  }
}

TEST(JobsPayloadTest, EncodeAndParseAgree) {
  StepResult error;
  error.status = StepResult::Status::kError;
  error.retryable = true;
  error.message = "disk full";
  const Parsed p = ParseStepResult(EncodeStepResult(error));
  ASSERT_EQ(p.kind, Kind::kStepError);
  EXPECT_TRUE(p.result.retryable);
  EXPECT_EQ(p.result.message, "disk full");
  StepResult done;
  done.content = "{\"frames\":3}";
  const Parsed d = ParseStepResult(EncodeStepResult(done));
  ASSERT_EQ(d.kind, Kind::kDone);
  EXPECT_EQ(d.result.content, done.content);
}

TEST(JobsPayloadTest, ClassifyTellsAbsentFromUnreachableFromBroken) {
  EXPECT_EQ(Classify(std::optional<std::string>()), ReadClass::kNotReady);
  EXPECT_EQ(Classify(UnavailableError("connection refused")), ReadClass::kTransient);
  EXPECT_EQ(Classify(Status(StatusCode::kDeadlineExceeded, "timeout")), ReadClass::kTransient);
  EXPECT_EQ(Classify(Status(StatusCode::kAborted, "LOADING")), ReadClass::kTransient);
  // The key holds something that is not a result (WRONGTYPE): broken, not "later".
  EXPECT_EQ(Classify(Status(StatusCode::kFailedPrecondition, "WRONGTYPE")), ReadClass::kTerminal);
  EXPECT_EQ(ReadClassName(ReadClass::kNotReady), "NOT_READY");
}

struct SanitizeCase {
  const char* name;
  std::string in;
  std::size_t limit;
  std::string want;
};

TEST(JobsPayloadTest, SanitizerRepairsStripsRedactsThenTruncates) {
  const std::vector<SanitizeCase> cases = {
      {"plain", "render failed: out of memory", 512, "render failed: out of memory"},
      {"newlines and tabs", "line1\nline2\tx\r\n", 512, "line1 line2 x  "},
      {"control bytes", std::string("a\x01\x1b[31mred\x7f", 11), 512, "ared"},
      {"escape sequence at the end", "x\x1b[1;3", 512, "x"},
      {"C1 control",
       "a\xc2\x85"
       "b",
       512, "ab"},
      {"bidi override", "invoice \xe2\x80\xaegnp.exe", 512, "invoice gnp.exe"},
      {"bidi isolate", "x\xe2\x81\xa6y\xe2\x81\xa9z", 512, "xyz"},
      {"invalid UTF-8", "bad \xff\xfe byte", 512, "bad \xef\xbf\xbd\xef\xbf\xbd byte"},
      {"truncated sequence at end", "end \xe2\x82", 512, "end \xef\xbf\xbd\xef\xbf\xbd"},
      {"overlong slash",
       "a\xc0\xaf"
       "b",
       512,
       "a\xef\xbf\xbd\xef\xbf\xbd"
       "b"},
      {"surrogate",
       "a\xed\xa0\x80"
       "b",
       512,
       "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
       "b"},
      {"URL", "GET https://internal.corp:8443/v1/jobs?id=7 failed", 512, "GET [url] failed"},
      {"URL with trailing dot", "see http://10.0.0.5/x.", 512, "see [url]."},
      {"path", "open /var/lib/worker/cache/7.bin: no such file", 512, "open [path]: no such file"},
      {"home and relative paths", "~/keys/id_rsa and ../secrets.txt", 512, "[path] and [path]"},
      {"windows path", "C:\\Users\\svc\\job.log locked", 512, "[path] locked"},
      {"quoted path", "file '/etc/worker.yaml' bad", 512, "file '[path]' bad"},
      {"not a path", "read/write and 3/4 done", 512, "read/write and 3/4 done"},
      {"URL cut by the limit", "error at https://secret.example.com/a/very/long/path", 20,
       "error at [url]"},
      {"path cut by the limit", "boom " + std::string("/srv/") + std::string(100, 'p'), 12,
       "boom [path]"},
      {"truncation", std::string(600, 'x'), 10, "xxxxxxx..."},
      {"truncation on a character boundary", "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 7,
       "\xc3\xa9\xc3\xa9..."},
  };
  for (const SanitizeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string out = SanitizeErrorText(c.in, SanitizeOptions{c.limit});
    EXPECT_EQ(out, c.want);
    EXPECT_LE(out.size(), c.limit);
    EXPECT_THAT(out, Not(HasSubstr("secret")));
    EXPECT_THAT(out, Not(HasSubstr("/srv/")));
  }
}

}  // namespace
}  // namespace drover::jobs
