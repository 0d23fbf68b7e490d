#include "drover/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace drover {
namespace {

using namespace std::chrono_literals;

TEST(FakeClockTest, MovesOnlyWhenAdvanced) {
  FakeClock clock;
  const MonoTime t0 = clock.Now();
  const SystemTime s0 = clock.SystemNow();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(1500ms);
  EXPECT_EQ(clock.Now() - t0, 1500ms);
  EXPECT_EQ(clock.SystemNow() - s0, 1500ms);
  clock.Advance(-5s);  // time never runs backwards
  EXPECT_EQ(clock.Now() - t0, 1500ms);
}

TEST(FakeClockTest, SleepReturnsImmediatelyForPastDeadline) {
  FakeClock clock;
  EXPECT_TRUE(clock.SleepUntil(clock.Now(), std::stop_token()));
  EXPECT_TRUE(clock.SleepUntil(clock.Now() - 1s, std::stop_token()));
}

TEST(FakeClockTest, AdvanceWakesSleeperOnlyPastItsDeadline) {
  FakeClock clock;
  std::atomic<bool> woke{false};
  std::atomic<bool> reached{false};
  const MonoTime deadline = clock.Now() + 10s;
  std::jthread sleeper([&] {
    reached = clock.SleepUntil(deadline, std::stop_token());
    woke = true;
  });
  ASSERT_TRUE(clock.AwaitSleepers(1, 10s));
  clock.Advance(9s);
  // Still parked: the deadline is one fake second away.
  ASSERT_TRUE(clock.AwaitSleepers(1, 10s));
  EXPECT_FALSE(woke.load());
  clock.Advance(1s);
  sleeper.join();
  EXPECT_TRUE(woke.load());
  EXPECT_TRUE(reached.load());
  EXPECT_EQ(clock.sleepers(), 0u);
}

TEST(FakeClockTest, StopRequestWakesSleeper) {
  FakeClock clock;
  std::atomic<int> result{-1};
  std::jthread sleeper(
      [&](std::stop_token stop) { result = clock.SleepUntil(clock.Now() + 1h, stop) ? 1 : 0; });
  ASSERT_TRUE(clock.AwaitSleepers(1, 10s));
  sleeper.request_stop();
  sleeper.join();
  EXPECT_EQ(result.load(), 0);
}

TEST(FakeClockTest, SleepForUsesFakeTime) {
  FakeClock clock;
  std::atomic<bool> done{false};
  std::jthread sleeper([&] {
    EXPECT_TRUE(clock.SleepFor(1min, std::stop_token()));
    done = true;
  });
  ASSERT_TRUE(clock.AwaitSleepers(1, 10s));
  clock.Advance(1min);
  sleeper.join();
  EXPECT_TRUE(done.load());
}

TEST(RealClockTest, StopBeatsLongDeadline) {
  RealClock clock;
  std::atomic<int> result{-1};
  std::jthread sleeper(
      [&](std::stop_token stop) { result = clock.SleepUntil(clock.Now() + 1h, stop) ? 1 : 0; });
  sleeper.request_stop();
  sleeper.join();
  EXPECT_EQ(result.load(), 0);
}

TEST(RealClockTest, ShortDeadlineIsReached) {
  RealClock clock;
  const MonoTime start = clock.Now();
  EXPECT_TRUE(clock.SleepFor(5ms, std::stop_token()));
  EXPECT_GE(clock.Now() - start, 5ms);
}

}  // namespace
}  // namespace drover
