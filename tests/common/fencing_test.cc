#include "common/fencing.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

TEST(FencingTest, TheErrorNamesTheNewestGenerationAndSurvivesContext) {
  const Status s = FencedError("zone", "z1", 5, 7, "removed");
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_EQ(s.message(), "fenced: zone/z1 generation 5 is stale: newest generation 7 (removed)");
  EXPECT_TRUE(IsFenced(s));
  EXPECT_EQ(FencedNewestGeneration(s), 7u);
  const Status wrapped = s.WithContext("register");
  EXPECT_TRUE(IsFenced(wrapped));
  EXPECT_EQ(FencedNewestGeneration(wrapped), 7u);
  EXPECT_EQ(FencedNewestGeneration(FencedError("a", "b", 1, 18446744073709551615u, "x")),
            18446744073709551615u);
}

TEST(FencingTest, OtherErrorsAreNotFencing) {
  EXPECT_FALSE(IsFenced(Status::Ok()));
  EXPECT_FALSE(IsFenced(Status(StatusCode::kAborted, "conflict: retry")));
  EXPECT_FALSE(IsFenced(Status(StatusCode::kUnavailable, "fenced: zone/z1 newest generation 3")));
  EXPECT_EQ(FencedNewestGeneration(Status(StatusCode::kAborted, "fenced: no number here")),
            std::nullopt);
  EXPECT_EQ(FencedNewestGeneration(Status(StatusCode::kAborted, "fenced: newest generation x")),
            std::nullopt);
  EXPECT_EQ(FencedNewestGeneration(NotFoundError("zone/z1 is not registered")), std::nullopt);
}

}  // namespace
}  // namespace drover
