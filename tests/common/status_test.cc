#include "drover/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace drover {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = InvalidArgumentError("weight must be positive");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: weight must be positive");
  EXPECT_EQ(s.WithContext("register").ToString(),
            "INVALID_ARGUMENT: register: weight must be positive");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
}

TEST(StatusTest, CodeNamesMatchGrpc) {
  EXPECT_EQ(StatusCodeName(StatusCode::kUnavailable), "UNAVAILABLE");
  EXPECT_EQ(StatusCodeName(StatusCode::kUnauthenticated), "UNAUTHENTICATED");
  EXPECT_EQ(static_cast<int>(StatusCode::kUnavailable), 14);
  EXPECT_EQ(StatusCodeName(static_cast<StatusCode>(99)), "UNKNOWN_CODE");
}

TEST(ResultTest, HoldsValueOrError) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 7);
  EXPECT_TRUE(good.status().ok());

  Result<int> bad = NotFoundError("no such service");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(bad.value_or(3), 3);
}

TEST(ResultTest, OkStatusWithoutValueBecomesInternalError) {
  Result<int> r = Status::Ok();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

Result<int> ParsePositive(int v) {
  if (v <= 0) return InvalidArgumentError("not positive: " + std::to_string(v));
  return v;
}

Status Check(int v) {
  if (v == 13) return FailedPreconditionError("unlucky");
  return Status::Ok();
}

Result<int> DoubleIt(int v) {
  DROVER_RETURN_IF_ERROR(Check(v));
  DROVER_ASSIGN_OR_RETURN(int parsed, ParsePositive(v));
  return parsed * 2;
}

TEST(StatusMacrosTest, PropagateErrorsAndValues) {
  EXPECT_EQ(*DoubleIt(4), 8);
  EXPECT_EQ(DoubleIt(-1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DoubleIt(13).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace drover
