#include "sdk/heartbeats.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>

#include "testing/eventually.h"

namespace drover::sdk {
namespace {

using namespace std::chrono_literals;

using testing::Eventually;

// Advances the fake clock by `d` once the heartbeat thread is asleep, then waits until `after`.
template <typename Pred>
void Step(FakeClock& clock, Duration d, Pred after) {
  ASSERT_TRUE(clock.AwaitSleepers(1, 10s));
  clock.Advance(d);
  ASSERT_TRUE(Eventually(after));
  ASSERT_TRUE(clock.AwaitSleepers(1, 10s));
}

TEST(HeartbeatsTest, RunsEveryTaskOnItsIntervalFromOneThread) {
  FakeClock clock;
  Heartbeats beats(clock);
  std::atomic<int> fast{0}, slow{0};
  beats.Add("fast", 1s, [&] { ++fast; });
  beats.Add("slow", 5s, [&] { ++slow; });
  for (int i = 1; i <= 10; ++i) {
    Step(clock, 1s, [&] { return fast.load() == i && slow.load() == i / 5; });
  }
  EXPECT_EQ(fast.load(), 10);
  EXPECT_EQ(slow.load(), 2);
}

TEST(HeartbeatsTest, AThrowingBeatIsCountedAndTheOthersKeepGoing) {
  FakeClock clock;
  Heartbeats beats(clock);
  std::atomic<int> ok{0};
  beats.Add("broken", 1s, [] { throw std::runtime_error("registry said no"); });
  beats.Add("fine", 1s, [&] { ++ok; });
  for (int i = 1; i <= 3; ++i) {
    Step(clock, 1s, [&] { return ok.load() == i && beats.failures() == std::uint64_t(i); });
  }
  EXPECT_EQ(beats.failures(), 3u);
  EXPECT_EQ(ok.load(), 3);
}

TEST(HeartbeatsTest, ADisabledTaskIsSkippedUntilEnabled) {
  FakeClock clock;
  Heartbeats beats(clock);
  std::atomic<bool> ready{false};
  std::atomic<int> ran{0};
  std::atomic<int> asked{0};
  auto enabled = [&] {
    ++asked;
    return ready.load();
  };
  beats.Add(
      "host", 1s, [&] { ++ran; }, enabled);
  Step(clock, 1s, [&] { return asked.load() == 1; });
  Step(clock, 1s, [&] { return asked.load() == 2; });
  EXPECT_EQ(ran.load(), 0);  // asked twice, skipped twice
  ready = true;
  Step(clock, 1s, [&] { return ran.load() == 1; });
  EXPECT_EQ(ran.load(), 1);
}

TEST(HeartbeatsTest, RemoveWaitsForARunningBeatAndItNeverRunsAgain) {
  RealClock clock;
  Heartbeats beats(clock);
  std::atomic<bool> inside{false}, release{false};
  std::atomic<int> ran{0};
  const auto id = beats.Add("slow", 1ms, [&] {
    inside = true;
    while (!release) std::this_thread::yield();
    ++ran;
  });
  while (!inside) std::this_thread::yield();
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    release = true;
  });
  beats.Remove(id);  // returns only after the beat in progress has finished
  const int after_remove = ran.load();
  EXPECT_GE(after_remove, 1);
  releaser.join();
  std::this_thread::sleep_for(20ms);  // a dozen intervals: it would have run again
  EXPECT_EQ(ran.load(), after_remove);
}

TEST(HeartbeatsTest, AFailedBeatHastensItsRetryThenKeepsItsInterval) {
  FakeClock clock;
  Heartbeats beats(clock);
  std::atomic<int> ran{0};
  std::atomic<std::uint64_t> id{0};
  id = beats.Add("lease", 10s, [&] {
    // The first two beats fail and ask for a retry in 1 s; the later ones succeed.
    if (++ran <= 2) beats.Hasten(id.load(), 1s);
  });
  Step(clock, 10s, [&] { return ran.load() == 1; });
  Step(clock, 1s, [&] { return ran.load() == 2; });
  Step(clock, 1s, [&] { return ran.load() == 3; });
  clock.Advance(9s);  // back on the 10 s interval: nothing due yet
  ASSERT_TRUE(clock.AwaitSleepers(1, 10s));
  EXPECT_EQ(ran.load(), 3);
  Step(clock, 1s, [&] { return ran.load() == 4; });
  beats.Hasten(999, 1s);         // an unknown task: ignored
  beats.Hasten(id.load(), 20s);  // later than it is due: changes nothing
  Step(clock, 10s, [&] { return ran.load() == 5; });
}

TEST(HeartbeatsTest, StopWakesTheThreadAtOnceMidSleep) {
  RealClock clock;
  Heartbeats beats(clock);
  beats.Add("hourly", std::chrono::hours(1), [] {});
  std::this_thread::sleep_for(20ms);  // asleep for the hour
  const auto start = std::chrono::steady_clock::now();
  beats.Stop();
  // Far less than the interval: the sleep was interrupted, not waited out.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  beats.Stop();  // idempotent
}

}  // namespace
}  // namespace drover::sdk
