// The small text helpers every part shares (common/text.h).
#include "common/text.h"

#include <gtest/gtest.h>

#include <string>

namespace drover {
namespace {

TEST(TextTest, EscapeBytesKeepsPrintableAsciiAndEscapesTheRest) {
  EXPECT_EQ(EscapeBytes("boss-1"), "boss-1");
  EXPECT_EQ(EscapeBytes(std::string("a\\b\n\xff", 5)), "a\\x5cb\\x0a\\xff");
  EXPECT_EQ(EscapeBytes(std::string(1, '\0')), "\\x00");
  EXPECT_EQ(EscapeBytes("abcdef", 3), "abc...");
  EXPECT_EQ(EscapeBytes("abc", 3), "abc");
}

TEST(TextTest, CaseAndLists) {
  EXPECT_TRUE(EqualsIgnoreCase("Content-Length", "content-length"));
  EXPECT_FALSE(EqualsIgnoreCase("a", "ab"));
  EXPECT_EQ(AsciiLower("Zone.Service.DROVER"), "zone.service.drover");
  EXPECT_EQ(SplitCommaList("a, b,,c"), (std::vector<std::string>{"a", "b", "", "c"}));
}

}  // namespace
}  // namespace drover
