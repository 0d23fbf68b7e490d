#include "drover/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
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
  // One fake second short: the deadline has not passed, so a sleeper whose stop fires at once
  // reports "stopped first" (and the parked one keeps sleeping).
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_FALSE(clock.SleepUntil(deadline, stopped.get_token()));
  clock.Advance(1s);
  EXPECT_TRUE(clock.SleepUntil(deadline, stopped.get_token()));
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
  std::latch started(1);
  std::jthread sleeper([&](std::stop_token stop) {
    started.count_down();
    result = clock.SleepUntil(clock.Now() + 1h, stop) ? 1 : 0;
  });
  // Usually lands while the sleeper is parked; a stop that comes first must end it as well.
  started.wait();
  sleeper.request_stop();
  sleeper.join();
  EXPECT_EQ(result.load(), 0);
}

TEST(ClockTest, DeadlineThatPassedWinsOverStopOnBothClocks) {
  std::stop_source stopped;
  stopped.request_stop();
  RealClock real;
  FakeClock fake;
  EXPECT_TRUE(real.SleepUntil(real.Now() - 1s, stopped.get_token()));
  EXPECT_TRUE(fake.SleepUntil(fake.Now() - 1s, stopped.get_token()));
  EXPECT_FALSE(real.SleepUntil(real.Now() + 1h, stopped.get_token()));
  EXPECT_FALSE(fake.SleepUntil(fake.Now() + 1h, stopped.get_token()));
}

TEST(RealClockTest, ShortDeadlineIsReached) {
  RealClock clock;
  const MonoTime start = clock.Now();
  EXPECT_TRUE(clock.SleepFor(5ms, std::stop_token()));
  EXPECT_GE(clock.Now() - start, 5ms);
}

}  // namespace
}  // namespace drover
