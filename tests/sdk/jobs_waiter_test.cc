// The waiter (JOB-3, JOB-5), the producer (JOB-2) and the retry budget (JOB-6) over the embedded
// store, on a FakeClock where timing matters: a failed job is terminal at once on its nudge and
// within one tick without it; a consumed value is never waited on again; nothing is lost in
// at-least-once mode; a budget of N grants exactly N.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "drover/jobs.h"

namespace drover::jobs {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Kind = WaitOutcome::Kind;

class JobsWaiterTest : public ::testing::Test {
 protected:
  WaitOptions Options(ReadMode mode = ReadMode::kDestructive) const {
    WaitOptions o;
    o.mode = mode;
    o.tick = 1s;
    o.timeout = 30s;
    return o;
  }
  // Runs Wait on a thread of its own; the test drives the FakeClock.
  std::future<WaitOutcome> StartWait(const WaitOptions& options, std::stop_token stop = {}) {
    auto f = std::async(std::launch::async, [this, options, stop] {
      return Wait(store_, clock_, "job-7", "render", options, stop);
    });
    EXPECT_TRUE(clock_.AwaitSleepers(1, 5000ms)) << "the waiter never went to sleep";
    return f;
  }
  static StepResult Failed(std::string message) {
    StepResult r;
    r.status = StepResult::Status::kError;
    r.message = std::move(message);
    return r;
  }

  FakeClock clock_;
  EmbeddedStore store_{clock_};
};

TEST_F(JobsWaiterTest, AFailureIsTerminalTheMomentItsNudgeArrives) {
  auto waiting = StartWait(Options());
  ASSERT_TRUE(
      PublishResult(store_, "job-7", "render", Failed("GPU lost\n at /opt/r/x.cc:12")).ok());
  const WaitOutcome out = waiting.get();
  EXPECT_EQ(out.kind, Kind::kStepError);
  EXPECT_EQ(out.message, "GPU lost  at [path]");  // sanitized, kept
  EXPECT_TRUE(out.nudged);
  EXPECT_EQ(out.waited, Duration::zero());  // no tick needed
  EXPECT_EQ(out.reads, 2);
}

TEST_F(JobsWaiterTest, WithoutANudgeItIsTerminalWithinOneTick) {
  auto waiting = StartWait(Options());
  ASSERT_TRUE(store_.Set(ResultKey("job-7", "render"), EncodeStepResult(Failed("bad")), 1h).ok());
  clock_.Advance(1s);
  const WaitOutcome out = waiting.get();
  EXPECT_EQ(out.kind, Kind::kStepError);
  EXPECT_FALSE(out.nudged);
  EXPECT_EQ(out.waited, 1s);
}

TEST_F(JobsWaiterTest, DoneCarriesTheContent) {
  StepResult done;
  done.content = "frame-1.png";
  ASSERT_TRUE(PublishResult(store_, "job-7", "render", done).ok());
  const WaitOutcome out = Wait(store_, clock_, "job-7", "render", Options());
  EXPECT_EQ(out.kind, Kind::kDone);
  EXPECT_EQ(out.content, "frame-1.png");
  EXPECT_EQ(out.reads, 1);
  EXPECT_FALSE(out.delivery_id.empty());
}

TEST_F(JobsWaiterTest, EveryValueIsFinalInBothModesAndOnlyDestructiveReadsConsumeIt) {
  const std::vector<std::pair<std::string, Kind>> values = {
      {R"({"status":"done","content":"x"})", Kind::kDone},
      {R"({"status":"error","message":"m"})", Kind::kStepError},
      {"{}", Kind::kProtocolError},
      {R"({"status":1})", Kind::kProtocolError},
      {R"({"status":"weird"})", Kind::kProtocolError},
      {R"({"status":"do)", Kind::kProtocolError},
      {std::string("\x00\xff", 2), Kind::kProtocolError},
  };
  for (const ReadMode mode : {ReadMode::kDestructive, ReadMode::kAtLeastOnce}) {
    for (const auto& [value, want] : values) {
      SCOPED_TRACE(value);
      ASSERT_TRUE(store_.Set(ResultKey("job-7", "render"), value, 1h).ok());
      const WaitOutcome out = Wait(store_, clock_, "job-7", "render", Options(mode));
      EXPECT_EQ(out.kind, want) << out.message;
      EXPECT_EQ(out.reads, 1);  // the first read was final: no wait after a value
      const auto left = store_.Get(ResultKey("job-7", "render"));
      EXPECT_EQ(left->has_value(), mode == ReadMode::kAtLeastOnce);
      ASSERT_TRUE(Acknowledge(store_, "job-7", "render").ok());
    }
  }
}

TEST_F(JobsWaiterTest, AnUnreachableStoreIsWaitedOutNotMistakenForAResult) {
  store_.SetAvailable(false);
  auto waiting = StartWait(Options());  // read 1: TRANSIENT, and no subscription either
  store_.SetAvailable(true);
  ASSERT_TRUE(PublishResult(store_, "job-7", "render", Failed("oom")).ok());  // nobody nudged
  clock_.Advance(1s);
  const WaitOutcome out = waiting.get();
  EXPECT_EQ(out.kind, Kind::kStepError);
  EXPECT_EQ(out.message, "oom");
  EXPECT_EQ(out.reads, 2);  // the ticker found it
  EXPECT_FALSE(out.nudged);
}

TEST_F(JobsWaiterTest, ATimeoutSaysWhatWasLastSeen) {
  WaitOptions o = Options();
  o.timeout = 3s;
  auto waiting = StartWait(o);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1s);
    if (i < 2) {
      ASSERT_TRUE(clock_.AwaitSleepers(1, 5000ms));
    }
  }
  WaitOutcome out = waiting.get();
  EXPECT_EQ(out.kind, Kind::kTimeout);
  EXPECT_THAT(out.message, HasSubstr("no result for step render of job job-7 within 3.0 s"));
  EXPECT_THAT(out.message, HasSubstr("NOT_READY (no value stored)"));

  store_.SetAvailable(false);
  o.timeout = 0s;
  out = Wait(store_, clock_, "job-7", "render", o);
  EXPECT_EQ(out.kind, Kind::kTimeout);
  EXPECT_THAT(out.message, HasSubstr("TRANSIENT (embedded store: unavailable"));
}

TEST_F(JobsWaiterTest, ACancelledWaitEndsAtOnce) {
  std::stop_source cancel;
  auto waiting = StartWait(Options(), cancel.get_token());
  cancel.request_stop();
  const WaitOutcome out = waiting.get();
  EXPECT_EQ(out.kind, Kind::kCancelled);
}

TEST_F(JobsWaiterTest, AtLeastOnceLosesNothingWhenTheWaiterDiesBeforeItsDelete) {
  ASSERT_TRUE(PublishResult(store_, "job-7", "render", Failed("x")).ok());
  const WaitOutcome first =
      Wait(store_, clock_, "job-7", "render", Options(ReadMode::kAtLeastOnce));
  ASSERT_EQ(first.kind, Kind::kStepError);
  // ... the process dies here: committed or not, Acknowledge never ran.
  const WaitOutcome again =
      Wait(store_, clock_, "job-7", "render", Options(ReadMode::kAtLeastOnce));
  EXPECT_EQ(again.kind, Kind::kStepError);
  EXPECT_EQ(again.delivery_id, first.delivery_id);  // the same delivery, recognisably
  EXPECT_FALSE(again.duplicate);
  // A caller that committed it says so: the delivery is a duplicate, and removed.
  WaitOptions o = Options(ReadMode::kAtLeastOnce);
  o.already_committed = [&](const std::string& id) { return id == first.delivery_id; };
  const WaitOutcome dup = Wait(store_, clock_, "job-7", "render", o);
  EXPECT_TRUE(dup.duplicate);
  EXPECT_FALSE(store_.Get(ResultKey("job-7", "render"))->has_value());
}

TEST_F(JobsWaiterTest, ABudgetOfOneAllowsExactlyOneRetry) {
  RetryBudget budget(store_, "job-7", "render", 1, 30s);
  EXPECT_EQ(budget.key(), "retry:{job-7}:render");
  EXPECT_TRUE(budget.Allow());
  EXPECT_FALSE(budget.Allow());
  EXPECT_FALSE(budget.Allow());
  EXPECT_EQ(store_.TtlOf(budget.key()), 60s);  // twice the wait's ceiling
  RetryBudget none(store_, "job-8", "render", 0, 30s);
  EXPECT_FALSE(none.Allow());
  // A store that cannot count means no retry: never a loop.
  RetryBudget blind(store_, "job-9", "render", 5, 30s);
  store_.SetAvailable(false);
  EXPECT_FALSE(blind.Allow());
}

TEST_F(JobsWaiterTest, ConcurrentAllowGrantsExactlyTheBudget) {
  constexpr int kBudget = 5;
  std::atomic<int> granted{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        RetryBudget budget(store_, "job-7", "render", kBudget, 30s);
        for (int i = 0; i < 10; ++i) granted += budget.Allow() ? 1 : 0;
      });
    }
  }
  EXPECT_EQ(granted.load(), kBudget);
  EXPECT_TRUE(store_.TtlOf("retry:{job-7}:render").has_value());
}

}  // namespace
}  // namespace drover::jobs
