// The per-node circuit breaker (JOB-7) on a FakeClock: a failed job is not a failed node, a
// probe's slot is freed only by its own report, and nothing can wedge it half-open.
#include <gtest/gtest.h>

#include <thread>

#include "drover/jobs.h"

namespace drover::jobs {
namespace {

using namespace std::chrono_literals;
using State = CircuitBreaker::State;

const BreakerOptions kOptions{/*failure_threshold=*/3, /*open_for=*/10s, /*half_open_probes=*/1,
                              /*probe_max_wait=*/30s};

class CircuitBreakerTest : public ::testing::Test {
 protected:
  // One call, start to end.
  void Call(CallOutcome outcome) {
    auto permit = breaker_.TryAcquire();
    ASSERT_TRUE(permit.has_value());
    breaker_.Report(*permit, outcome);
  }
  void Open() {
    for (int i = 0; i < kOptions.failure_threshold; ++i) Call(CallOutcome::kTransportError);
    ASSERT_EQ(breaker_.state(), State::kOpen);
  }
  void HalfOpen() {
    Open();
    clock_.Advance(kOptions.open_for);
    ASSERT_EQ(breaker_.state(), State::kHalfOpen);
  }

  FakeClock clock_;
  CircuitBreaker breaker_{kOptions, clock_};
};

TEST_F(CircuitBreakerTest, StepErrorsNeverOpenIt) {
  for (int i = 0; i < 100; ++i) Call(CallOutcome::kStepError);
  EXPECT_EQ(breaker_.state(), State::kClosed);
}

TEST_F(CircuitBreakerTest, ProtocolAndTransportFailuresInARowOpenIt) {
  Call(CallOutcome::kProtocolError);
  Call(CallOutcome::kTransportError);
  EXPECT_EQ(breaker_.state(), State::kClosed);
  Call(CallOutcome::kProtocolError);
  EXPECT_EQ(breaker_.state(), State::kOpen);
  EXPECT_FALSE(breaker_.TryAcquire().has_value());
  clock_.Advance(kOptions.open_for - 1ms);
  EXPECT_FALSE(breaker_.TryAcquire().has_value());
  clock_.Advance(1ms);
  EXPECT_EQ(breaker_.state(), State::kHalfOpen);
}

TEST_F(CircuitBreakerTest, ASuccessOrAStepErrorBetweenFailuresResetsTheCount) {
  Call(CallOutcome::kTransportError);
  Call(CallOutcome::kTransportError);
  Call(CallOutcome::kStepError);  // the node answered: it is up
  Call(CallOutcome::kTransportError);
  Call(CallOutcome::kTransportError);
  EXPECT_EQ(breaker_.state(), State::kClosed);
  Call(CallOutcome::kCancelled);  // neither: the count stays
  Call(CallOutcome::kTransportError);
  EXPECT_EQ(breaker_.state(), State::kOpen);
}

TEST_F(CircuitBreakerTest, HalfOpenLetsOneProbeThrough) {
  HalfOpen();
  auto probe = breaker_.TryAcquire();
  ASSERT_TRUE(probe.has_value());
  EXPECT_NE(probe->probe, 0u);
  EXPECT_FALSE(breaker_.TryAcquire().has_value());  // the one slot is taken
  EXPECT_EQ(breaker_.probes_in_flight(), 1);
  breaker_.Report(*probe, CallOutcome::kSuccess);
  EXPECT_EQ(breaker_.state(), State::kClosed);
}

TEST_F(CircuitBreakerTest, AStepErrorFromTheProbeClosesIt) {
  HalfOpen();
  auto probe = breaker_.TryAcquire();
  breaker_.Report(*probe, CallOutcome::kStepError);
  EXPECT_EQ(breaker_.state(), State::kClosed);
  EXPECT_EQ(breaker_.probes_in_flight(), 0);
}

TEST_F(CircuitBreakerTest, AFailedProbeOpensItAgain) {
  HalfOpen();
  auto probe = breaker_.TryAcquire();
  breaker_.Report(*probe, CallOutcome::kProtocolError);
  EXPECT_EQ(breaker_.state(), State::kOpen);
  EXPECT_FALSE(breaker_.TryAcquire().has_value());
}

TEST_F(CircuitBreakerTest, ACancelledProbeFreesItsSlotAndDecidesNothing) {
  HalfOpen();
  auto probe = breaker_.TryAcquire();
  breaker_.Report(*probe, CallOutcome::kCancelled);
  EXPECT_EQ(breaker_.state(), State::kHalfOpen);
  EXPECT_EQ(breaker_.probes_in_flight(), 0);
  auto next = breaker_.TryAcquire();  // the slot is free again
  ASSERT_TRUE(next.has_value());
  EXPECT_NE(next->probe, probe->probe);
  breaker_.Report(*next, CallOutcome::kSuccess);
  EXPECT_EQ(breaker_.state(), State::kClosed);
}

TEST_F(CircuitBreakerTest, ACallFromTheClosedStateNeverTouchesTheProbe) {
  auto old_call = breaker_.TryAcquire();  // started while closed
  ASSERT_TRUE(old_call.has_value());
  HalfOpen();
  auto probe = breaker_.TryAcquire();
  ASSERT_TRUE(probe.has_value());
  // The old call ends now, either way: no slot freed, no state decided.
  breaker_.Report(*old_call, CallOutcome::kSuccess);
  EXPECT_EQ(breaker_.state(), State::kHalfOpen);
  EXPECT_EQ(breaker_.probes_in_flight(), 1);
  breaker_.Report(*old_call, CallOutcome::kTransportError);
  EXPECT_EQ(breaker_.state(), State::kHalfOpen);
  EXPECT_FALSE(breaker_.TryAcquire().has_value());
  breaker_.Report(*probe, CallOutcome::kSuccess);
  EXPECT_EQ(breaker_.state(), State::kClosed);
}

TEST_F(CircuitBreakerTest, AProbeThatNeverReportsIsReclaimed) {
  HalfOpen();
  auto lost = breaker_.TryAcquire();
  ASSERT_TRUE(lost.has_value());
  clock_.Advance(kOptions.probe_max_wait);
  EXPECT_EQ(breaker_.state(), State::kOpen);  // presumed failed
  clock_.Advance(kOptions.open_for);
  auto fresh = breaker_.TryAcquire();
  ASSERT_TRUE(fresh.has_value());
  breaker_.Report(*lost, CallOutcome::kSuccess);  // far too late: decides nothing
  EXPECT_EQ(breaker_.probes_in_flight(), 1);
  breaker_.Report(*fresh, CallOutcome::kSuccess);
  EXPECT_EQ(breaker_.state(), State::kClosed);
}

TEST_F(CircuitBreakerTest, ConcurrentCallsWhileHalfOpenGetExactlyTheProbeSlots) {
  BreakerOptions options = kOptions;
  options.half_open_probes = 2;
  CircuitBreaker breaker(options, clock_);
  for (int i = 0; i < options.failure_threshold; ++i) {
    breaker.Report(*breaker.TryAcquire(), CallOutcome::kTransportError);
  }
  clock_.Advance(options.open_for);
  std::atomic<int> granted{0};
  // One slot per thread (not a vector<bool>: its bits share words, and so would the threads).
  std::vector<std::optional<CircuitBreaker::Permit>> permits(8);
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < permits.size(); ++t) {
      threads.emplace_back([&, t] {
        permits[t] = breaker.TryAcquire();
        if (permits[t]) ++granted;
      });
    }
  }
  EXPECT_EQ(granted.load(), 2);
  EXPECT_EQ(breaker.probes_in_flight(), 2);
  // Both cancel: both slots free, still half-open.
  for (const auto& p : permits) {
    if (p) breaker.Report(*p, CallOutcome::kCancelled);
  }
  EXPECT_EQ(breaker.probes_in_flight(), 0);
  EXPECT_EQ(breaker.state(), State::kHalfOpen);
}

}  // namespace
}  // namespace drover::jobs
