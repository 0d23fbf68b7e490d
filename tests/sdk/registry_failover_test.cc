// The failover rules of a client with several registries (sdk/registry_failover.h), the
// registry-list parser, and the address rule as a table (advertised address x registries).
#include "sdk/registry_failover.h"

#include <gtest/gtest.h>

#include <thread>

#include "sdk/registry_channel.h"

namespace drover::sdk {
namespace {

using namespace std::chrono_literals;

const Status kDown = UnavailableError("connection refused");

TEST(RegistryFailoverTest, MovesToTheNextEndpointAtOnceAndBacksOffOnceEveryOneFailed) {
  RegistryFailover f({"a:1", "b:1", "c:1"}, {.min_backoff = 100ms, .max_backoff = 1s});
  EXPECT_EQ(f.current(), 0u);
  EXPECT_EQ(f.Failed(0, kDown), Duration::zero());
  EXPECT_EQ(f.current(), 1u);
  EXPECT_EQ(f.Failed(1, kDown), Duration::zero());
  EXPECT_EQ(f.current(), 2u);
  EXPECT_FALSE(f.AllFailing());
  // The third failure completes the round: wait, within [backoff/2, backoff].
  const Duration first = f.Failed(2, kDown);
  EXPECT_TRUE(f.AllFailing());
  EXPECT_GE(first, 50ms);
  EXPECT_LE(first, 100ms);
  EXPECT_EQ(f.current(), 0u);
  // The backoff doubles per failure from here on, capped.
  Duration last{};
  for (int i = 0; i < 10; ++i) last = f.Failed(f.current(), kDown);
  EXPECT_GE(last, 500ms);
  EXPECT_LE(last, 1s);
  // A success ends the outage: the next failure moves on at once again, and the backoff restarts.
  const std::size_t up = f.current();
  f.Succeeded(up);
  EXPECT_FALSE(f.AllFailing());
  EXPECT_EQ(f.Failed(up, kDown), Duration::zero());
  EXPECT_EQ(f.Failed(f.current(), kDown), Duration::zero());
  EXPECT_LE(f.Failed(f.current(), kDown), 100ms);
}

TEST(RegistryFailoverTest, OneEndpointOnlyBacksOffCappedAtTheMaximum) {
  RegistryFailover f({"a:1"}, {.min_backoff = 200ms, .max_backoff = 1s});
  Duration wait{};
  for (int i = 0; i < 20; ++i) {
    wait = f.Failed(0, kDown);
    EXPECT_EQ(f.current(), 0u);
    EXPECT_LE(wait, 1s);
  }
  EXPECT_GE(wait, 500ms);
}

TEST(RegistryFailoverTest, AFailureOnAnEndpointAlreadyLeftChangesNothing) {
  RegistryFailover f({"a:1", "b:1"});
  // Two calls were in flight on a; the first failure moves to b, the second must not move on to
  // a again (b has not failed).
  EXPECT_EQ(f.Failed(0, kDown), Duration::zero());
  EXPECT_EQ(f.Failed(0, kDown), Duration::zero());
  EXPECT_EQ(f.current(), 1u);
  EXPECT_FALSE(f.AllFailing());
  // Likewise a late success reported on a does not end b's run.
  f.Succeeded(0);
  EXPECT_EQ(f.current(), 1u);
}

TEST(RegistryFailoverTest, ConcurrentCallersKeepItConsistent) {
  RegistryFailover f({"a:1", "b:1", "c:1"}, {.min_backoff = 1ms, .max_backoff = 2ms});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&f, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::size_t index = f.current();
        if ((i + t) % 3 == 0) {
          f.Succeeded(index);
        } else {
          EXPECT_LE(f.Failed(index, kDown), 2ms);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(f.current(), 3u);
}

TEST(RegistryFailoverTest, OnlyFailuresAnotherRegistryMayNotHaveMoveTheClient) {
  EXPECT_TRUE(MayWorkElsewhere(StatusCode::kUnavailable));
  EXPECT_TRUE(MayWorkElsewhere(StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(MayWorkElsewhere(StatusCode::kCancelled));  // a registry shutting down
  EXPECT_FALSE(MayWorkElsewhere(StatusCode::kAborted));   // fenced: the same everywhere
  EXPECT_FALSE(MayWorkElsewhere(StatusCode::kUnauthenticated));
  EXPECT_FALSE(MayWorkElsewhere(StatusCode::kInvalidArgument));
  EXPECT_FALSE(MayWorkElsewhere(StatusCode::kNotFound));
}

TEST(RegistryTargetsTest, ParsesACommaSeparatedList) {
  auto targets =
      ParseRegistryTargets("127.0.0.2:7071, grpcs://reg.example:7071 ,grpc://[::1]:7", "");
  ASSERT_TRUE(targets.ok()) << targets.status().ToString();
  ASSERT_EQ(targets->size(), 3u);
  EXPECT_EQ((*targets)[0].address, "127.0.0.2:7071");
  EXPECT_FALSE((*targets)[0].tls);
  EXPECT_EQ((*targets)[1].address, "reg.example:7071");
  EXPECT_TRUE((*targets)[1].tls);
  EXPECT_EQ((*targets)[2].address, "[::1]:7");

  EXPECT_EQ(ParseRegistryTargets("", "").status().code(), StatusCode::kInvalidArgument);
  const Status empty_entry = ParseRegistryTargets("a:1,,b:1", "").status();
  EXPECT_EQ(empty_entry.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty_entry.message().find("empty entry"), std::string::npos);
  const Status bad = ParseRegistryTargets("a:1,http://b:1", "").status();
  EXPECT_NE(bad.message().find("http://b:1"), std::string::npos) << bad.message();
}

// The address rule: a loopback address only with registries that are all on loopback too.
TEST(AddressRuleTest, ALoopbackAddressGoesOnlyToRegistriesOnLoopback) {
  struct Case {
    const char* address;
    const char* registries;
    bool allowed;
  };
  const Case cases[] = {
      {"127.0.0.1:9000", "127.0.0.1:7071", true},
      {"127.0.0.3:9000", "127.0.0.2:7071", true},  // fleet tests: a "machine" per address
      {"127.0.0.1:9000", "[::1]:7071", true},
      {"[::1]:9000", "localhost:7071", true},
      {"localhost:9000", "127.0.0.1:7071,127.0.0.2:7071", true},
      {"127.0.0.1:9000", "10.1.2.3:7071", false},
      {"[::1]:9000", "grpcs://reg.example:7071", false},
      {"localhost:9000", "10.1.2.3:7071", false},
      {"127.0.0.1:9000", "127.0.0.2:7071,10.1.2.3:7071", false},  // any non-loopback registry
      {"10.0.0.5:9000", "127.0.0.1:7071", true},  // a routable address goes anywhere
      {"10.0.0.5:9000", "10.1.2.3:7071", true},
      {"zone-1.example:9000", "10.1.2.3:7071", true},
      {"[fd00::5]:9000", "[fd00::1]:7071", true},
  };
  for (const Case& c : cases) {
    const Status s = CheckAdvertisable("address", c.address, c.registries, "");
    EXPECT_EQ(s.ok(), c.allowed) << c.address << " with " << c.registries << ": " << s.ToString();
    if (!c.allowed) {
      EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(s.message().find(std::string(c.address) + " is loopback"), std::string::npos)
          << s.message();
    }
  }
}

}  // namespace
}  // namespace drover::sdk
