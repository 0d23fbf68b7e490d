#include "common/cidr.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

TEST(CidrTest, RangesMatchTheirAddressesOnly) {
  auto ranges = ParseCidrList("10.0.0.0/8, 192.168.1.7,::1/128,fd00::/8,0.0.0.0/0", "--allow");
  ASSERT_TRUE(ranges.ok()) << ranges.status().ToString();
  ASSERT_EQ(ranges->size(), 5u);
  const Cidr& ten = (*ranges)[0];
  EXPECT_TRUE(ten.Contains("10.255.0.1"));
  EXPECT_FALSE(ten.Contains("11.0.0.1"));
  EXPECT_TRUE(ten.Contains("::ffff:10.1.2.3"));  // IPv4-mapped
  EXPECT_FALSE(ten.Contains("fd00::1"));
  EXPECT_FALSE(ten.Contains("not-an-ip"));
  EXPECT_TRUE((*ranges)[1].Contains("192.168.1.7"));
  EXPECT_FALSE((*ranges)[1].Contains("192.168.1.8"));
  EXPECT_TRUE((*ranges)[2].Contains("::1"));
  EXPECT_FALSE((*ranges)[2].Contains("127.0.0.1"));
  EXPECT_TRUE((*ranges)[3].Contains("fd12:3456::9"));
  EXPECT_TRUE((*ranges)[4].Contains("203.0.113.9"));
  EXPECT_EQ(ten.ToString(), "10.0.0.0/8");
  EXPECT_TRUE(AnyContains(*ranges, "::1"));
  EXPECT_FALSE(AnyContains(std::vector<Cidr>(ranges->begin(), ranges->begin() + 2), "127.0.0.1"));
}

TEST(CidrTest, BitsPastThePrefixAreIgnoredAndOddPrefixesWork) {
  auto ranges = ParseCidrList("10.1.2.3/8,172.16.0.0/12", "--allow");
  ASSERT_TRUE(ranges.ok());
  EXPECT_EQ((*ranges)[0].ToString(), "10.0.0.0/8");
  EXPECT_TRUE((*ranges)[1].Contains("172.31.255.255"));
  EXPECT_FALSE((*ranges)[1].Contains("172.32.0.0"));
}

TEST(CidrTest, BadEntriesNameTheFlagAndTheEntry) {
  for (const char* bad :
       {"10.0.0.0/33", "10.0.0/8", "::1/129", "host.example", "10.0.0.0/", "1.2.3.4/x"}) {
    auto r = ParseCidrList(std::string("127.0.0.1,") + bad, "--xds-allow");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--xds-allow '" + std::string(bad) + "'"),
              std::string::npos)
        << r.status().message();
  }
  auto empty = ParseCidrList("", "--xds-allow");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace drover
