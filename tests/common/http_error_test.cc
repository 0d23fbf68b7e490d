// The one Status -> HTTP mapping every Drover HTTP API answers with.
#include "common/http_error.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/fencing.h"

namespace drover {
namespace {

TEST(HttpErrorTest, EveryCodeHasItsStatus) {
  const std::vector<std::pair<StatusCode, unsigned>> expected = {
      {StatusCode::kOk, 200},
      {StatusCode::kCancelled, 500},
      {StatusCode::kUnknown, 500},
      {StatusCode::kInvalidArgument, 400},
      {StatusCode::kDeadlineExceeded, 504},
      {StatusCode::kNotFound, 404},
      {StatusCode::kAlreadyExists, 409},
      {StatusCode::kPermissionDenied, 403},
      {StatusCode::kResourceExhausted, 429},
      {StatusCode::kFailedPrecondition, 409},
      {StatusCode::kAborted, 409},
      {StatusCode::kOutOfRange, 400},
      {StatusCode::kUnimplemented, 501},
      {StatusCode::kInternal, 500},
      {StatusCode::kUnavailable, 503},
      {StatusCode::kDataLoss, 500},
      {StatusCode::kUnauthenticated, 401},
  };
  ASSERT_EQ(expected.size(), 17u);  // every code
  for (const auto& [code, http] : expected) {
    EXPECT_EQ(HttpStatusOf(code), http) << StatusCodeName(code);
  }
}

TEST(HttpErrorTest, TheBodyNamesTheCodeAndAFencedWriterLearnsTheGenerationToBeat) {
  const auto body = nlohmann::json::parse(ErrorBody(DataLossError("cannot read deploys.json")));
  EXPECT_EQ(body["error"]["code"], "DATA_LOSS");
  EXPECT_EQ(body["error"]["message"], "cannot read deploys.json");
  EXPECT_FALSE(body["error"].contains("newest_generation"));

  const Status fenced = FencedError("zone", "z1", 3, 7, "a newer process registered");
  EXPECT_EQ(ErrorCodeName(fenced), "FENCED");
  const auto fenced_body = nlohmann::json::parse(ErrorBody(fenced));
  EXPECT_EQ(fenced_body["error"]["code"], "FENCED");
  EXPECT_EQ(fenced_body["error"]["newest_generation"], 7);
  EXPECT_EQ(HttpStatusOf(fenced.code()), 409u);
}

TEST(HttpErrorTest, BytesThatAreNotUtf8AreReplacedNotThrown) {
  const std::string body = ErrorBody(NotFoundError("no such endpoint: /\xff\xfe"));
  EXPECT_TRUE(nlohmann::json::accept(body));
  EXPECT_EQ(body.back(), '\n');
}

TEST(HttpErrorTest, AClientReadsEveryCodeBackFromTheBody) {
  for (int c = 1; c <= static_cast<int>(StatusCode::kUnauthenticated); ++c) {
    const Status sent(static_cast<StatusCode>(c), "why");
    const Status read = StatusOfErrorReply(HttpStatusOf(sent.code()), ErrorBody(sent), "agent");
    EXPECT_EQ(read.code(), sent.code()) << StatusCodeName(sent.code());
    EXPECT_EQ(read.message(), "agent: why");
  }
  const Status fenced = FencedError("zone", "z1", 3, 7, "a newer process registered");
  EXPECT_EQ(StatusOfErrorReply(409, ErrorBody(fenced), "registry").code(), StatusCode::kAborted);

  // Not an error body: a proxy's page. Quoted, bounded, UNAVAILABLE.
  const Status page = StatusOfErrorReply(502, "<html>" + std::string(1000, 'x'), "agent");
  EXPECT_EQ(page.code(), StatusCode::kUnavailable);
  EXPECT_EQ(page.message().rfind("agent: HTTP 502: <html>xx", 0), 0u) << page.message();
  EXPECT_LT(page.message().size(), 300u);
  EXPECT_EQ(StatusOfErrorReply(500, R"({"error":"flat"})", "agent").code(),
            StatusCode::kUnavailable);
}

}  // namespace
}  // namespace drover
