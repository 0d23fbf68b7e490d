// host:port, the one parser of every address: what it accepts, what it refuses and how it says so.
#include "common/host_port.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace drover {
namespace {

using ::testing::HasSubstr;

TEST(HostPortTest, AcceptsIpv4BracketedIpv6AndNames) {
  auto v4 = ParseHostPort("10.0.0.5:7070", "--http");
  ASSERT_TRUE(v4.ok()) << v4.status().ToString();
  EXPECT_EQ(v4->host, "10.0.0.5");
  EXPECT_EQ(v4->port, 7070);
  EXPECT_EQ(v4->kind, HostKind::kIpv4);
  EXPECT_EQ(v4->ToString(), "10.0.0.5:7070");

  auto v6 = ParseHostPort("[fe80::1]:443", "--http");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->host, "fe80::1");
  EXPECT_EQ(v6->kind, HostKind::kIpv6);
  EXPECT_EQ(v6->ToString(), "[fe80::1]:443");

  auto name = ParseHostPort("etcd-1.internal_zone.example:2379", "etcd endpoint");
  ASSERT_TRUE(name.ok()) << name.status().ToString();
  EXPECT_EQ(name->kind, HostKind::kName);
  EXPECT_EQ(name->WithPort(1).ToString(), "etcd-1.internal_zone.example:1");
}

TEST(HostPortTest, RefusesWhatCannotBeAnAddressAndSaysWhy) {
  struct Case {
    std::string text;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{
           {"10.0.0.5", "no ':port'"},
           {":80", "the host is missing"},
           {"::1:80", "goes in brackets"},
           {"[::1:80", "needs its ']'"},
           {"[10.0.0.1]:80", "not an IPv6 address"},
           {"10.0.0.5:", "the port must be 1..65535"},
           {"10.0.0.5:0", "the port must be 1..65535"},
           {"10.0.0.5:65536", "the port must be 1..65535"},
           {"10.0.0.5:-80", "the port must be 1..65535"},
           {"10.0.0.5:+80", "the port must be 1..65535"},
           {"10.0.0.5:http", "the port must be 1..65535"},
           {"bad host:80", "a character a host name cannot have"},
           {"-leading.example:80", "starts or ends with"},
           {"a..b:80", "an empty label"},
           {std::string(64, 'a') + ".example:80", "longer than 63"},
       }) {
    auto parsed = ParseHostPort(c.text, "address");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("address '" + c.text + "' is not host:port"));
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.why)) << c.text;
  }
}

TEST(HostPortTest, RulesForListenersAndLiterals) {
  EXPECT_FALSE(ParseHostPort("127.0.0.1:0", "x").ok());
  auto any = ParseHostPort("127.0.0.1:0", "x", {.allow_port_zero = true});
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->port, 0);
  EXPECT_THAT(ParseHostPort("db.example:5432", "x", {.require_ip = true}).status().message(),
              HasSubstr("not an IP address"));
  EXPECT_THAT(ParseHostPort("[::1]:80", "x", {.ipv4_only = true}).status().message(),
              HasSubstr("not an IPv4 address"));
}

TEST(HostPortTest, SaysWhichPartWasWrong) {
  HostPortFault fault = HostPortFault::kNone;
  EXPECT_FALSE(ParseHostPort("10.0.0.5:0", "x", {}, &fault).ok());
  EXPECT_EQ(fault, HostPortFault::kPort);
  EXPECT_FALSE(ParseHostPort("bad host:80", "x", {}, &fault).ok());
  EXPECT_EQ(fault, HostPortFault::kHost);
  EXPECT_FALSE(ParseHostPort("10.0.0.5", "x", {}, &fault).ok());
  EXPECT_EQ(fault, HostPortFault::kHost);
  EXPECT_TRUE(ParseHostPort("10.0.0.5:80", "x", {}, &fault).ok());
  EXPECT_EQ(fault, HostPortFault::kNone);
}

TEST(HostPortTest, LoopbackAndWildcard) {
  for (const char* loopback : {"127.0.0.1:1", "127.8.9.10:1", "[::1]:1", "localhost:1"}) {
    EXPECT_TRUE(ParseHostPort(loopback, "x")->IsLoopback()) << loopback;
  }
  for (const char* remote : {"10.0.0.1:1", "[fe80::1]:1", "db.example:1", "128.0.0.1:1"}) {
    EXPECT_FALSE(ParseHostPort(remote, "x")->IsLoopback()) << remote;
  }
  EXPECT_TRUE(ParseHostPort("0.0.0.0:1", "x")->IsWildcard());
  EXPECT_TRUE(ParseHostPort("[::]:1", "x")->IsWildcard());
  EXPECT_FALSE(ParseHostPort("127.0.0.1:1", "x")->IsWildcard());
}

}  // namespace
}  // namespace drover
