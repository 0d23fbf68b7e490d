// The Dispatcher (JOB-6, JOB-7, JOB-8) over the embedded store and scripted nodes: retries go
// to another node within the budget, step errors never trip a node's breaker, an open breaker is
// skipped, and the job's state moves only by compare-and-set -- one owner, one end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "drover/jobs.h"
#include "drover/router.h"

namespace drover::jobs {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using End = DispatchResult::End;

// How a scripted node answers a job.
enum class Behaviour { kOk, kStepError, kRetryable, kGarbage, kDown, kSilent };

class DispatcherTest : public ::testing::Test {
 protected:
  DispatchOptions Options() const {
    DispatchOptions o;
    o.max_retries = 2;
    o.wait.tick = 5ms;
    o.wait.timeout = 100ms;
    o.breaker.failure_threshold = 1;  // one failure opens a node's breaker: easy to see
    o.breaker.open_for = 1h;
    return o;
  }

  std::unique_ptr<Dispatcher> Make(std::map<std::string, Behaviour> nodes,
                                   DispatchOptions options) {
    behaviour_ = std::move(nodes);
    return std::make_unique<Dispatcher>(
        store_,
        [this]() -> Result<std::shared_ptr<const router::RoutingTable>> {
          std::vector<router::Endpoint> endpoints;
          for (const auto& [id, b] : behaviour_) {
            router::Endpoint e;
            e.id = id;
            e.address = "127.0.0.1:1";
            e.state = router::EndpointState::kReady;
            endpoints.push_back(e);
          }
          return router::RoutingTable::Create(1, endpoints);
        },
        [this](const router::Endpoint& node, const std::string& job, const std::string& step,
               const std::string& payload) -> Status {
          EXPECT_EQ(payload, "frame 7");
          if (on_submit_) on_submit_(node.id);
          StepResult r;
          switch (behaviour_.at(node.id)) {
            case Behaviour::kOk:
              r.content = "rendered by " + node.id;
              return PublishResult(store_, job, step, r);
            case Behaviour::kStepError:
            case Behaviour::kRetryable:
              r.status = StepResult::Status::kError;
              r.retryable = behaviour_.at(node.id) == Behaviour::kRetryable;
              r.message = "scene invalid on " + node.id;
              return PublishResult(store_, job, step, r);
            case Behaviour::kGarbage:
              return store_.Set(ResultKey(job, step), "{}", 1min);
            case Behaviour::kDown:
              return UnavailableError("connection refused");
            case Behaviour::kSilent:
              return Status::Ok();
          }
          return Status::Ok();
        },
        clock_, options);
  }

  RealClock clock_;
  EmbeddedStore store_{clock_};
  std::map<std::string, Behaviour> behaviour_;
  std::function<void(const std::string&)> on_submit_;
};

TEST_F(DispatcherTest, AHealthyNodeDoesTheJobOnce) {
  auto d = Make({{"a", Behaviour::kOk}}, Options());
  const DispatchResult r = d->Run("job-1", "render", "frame 7");
  EXPECT_EQ(r.end, End::kDone) << r.reason;
  EXPECT_EQ(r.last.content, "rendered by a");
  EXPECT_THAT(r.nodes, ElementsAre("a"));
  EXPECT_EQ(store_.Get(Dispatcher::StateKey("job-1", "render"))->value(), "done");
}

TEST_F(DispatcherTest, AFinalStepErrorEndsItAndIsNotTheNodesFault) {
  auto d = Make({{"a", Behaviour::kStepError}, {"b", Behaviour::kStepError}}, Options());
  const DispatchResult r = d->Run("job-1", "render", "frame 7");
  EXPECT_EQ(r.end, End::kFailed);
  EXPECT_THAT(r.reason, HasSubstr("scene invalid on"));
  EXPECT_EQ(r.nodes.size(), 1u);  // no retry
  EXPECT_EQ(d->BreakerState(r.nodes[0]), CircuitBreaker::State::kClosed);
  EXPECT_EQ(store_.Get(Dispatcher::StateKey("job-1", "render"))->value(), "failed");
}

TEST_F(DispatcherTest, RetriesGoToAnotherNode) {
  for (const Behaviour bad :
       {Behaviour::kRetryable, Behaviour::kGarbage, Behaviour::kDown, Behaviour::kSilent}) {
    SCOPED_TRACE(static_cast<int>(bad));
    auto d = Make({{"a", bad}, {"b", Behaviour::kOk}}, Options());
    // P2C between two idle nodes picks either: dispatch until "a" came first.
    DispatchResult r;
    for (int i = 0; i < 100 && (r.nodes.empty() || r.nodes.front() != "a"); ++i) {
      r = d->Run("job-" + std::to_string(static_cast<int>(bad)) + "-" + std::to_string(i), "render",
                 "frame 7");
      ASSERT_EQ(r.end, End::kDone) << r.reason;
      ASSERT_EQ(r.nodes.back(), "b");
    }
    ASSERT_THAT(r.nodes, ElementsAre("a", "b"));
    // A step error does not count against a node; garbage, refusal and silence do.
    EXPECT_EQ(d->BreakerState("a"), bad == Behaviour::kRetryable ? CircuitBreaker::State::kClosed
                                                                 : CircuitBreaker::State::kOpen);
  }
}

TEST_F(DispatcherTest, TheBudgetEndsRetriesExactly) {
  auto d = Make({{"a", Behaviour::kRetryable},
                 {"b", Behaviour::kRetryable},
                 {"c", Behaviour::kRetryable},
                 {"d", Behaviour::kRetryable}},
                Options());
  const DispatchResult r = d->Run("job-1", "render", "frame 7");
  EXPECT_EQ(r.end, End::kFailed);
  EXPECT_EQ(r.nodes.size(), 3u);  // the first attempt and max_retries = 2 retries
  EXPECT_THAT(r.reason, HasSubstr("gave up after 3 attempt(s)"));
  EXPECT_EQ(std::set<std::string>(r.nodes.begin(), r.nodes.end()).size(), 3u);  // all different
  EXPECT_EQ(store_.Get(Dispatcher::StateKey("job-1", "render"))->value(), "failed");
}

TEST_F(DispatcherTest, NoOtherNodeToRetryOn) {
  auto d = Make({{"a", Behaviour::kRetryable}}, Options());
  const DispatchResult r = d->Run("job-1", "render", "frame 7");
  EXPECT_EQ(r.end, End::kNoNode);
  EXPECT_THAT(r.reason, HasSubstr("no other compute node to retry on"));
}

TEST_F(DispatcherTest, AnOpenBreakerIsSkipped) {
  auto d = Make({{"a", Behaviour::kDown}, {"b", Behaviour::kOk}}, Options());
  // Until "a" has been tried once (and its breaker opened), P2C may pick either.
  for (int i = 0; i < 50 && d->BreakerState("a") != CircuitBreaker::State::kOpen; ++i) {
    ASSERT_EQ(d->Run("warm-" + std::to_string(i), "render", "frame 7").end, End::kDone);
  }
  ASSERT_EQ(d->BreakerState("a"), CircuitBreaker::State::kOpen);
  for (int i = 0; i < 20; ++i) {
    const DispatchResult r = d->Run("job-" + std::to_string(i), "render", "frame 7");
    EXPECT_THAT(r.nodes, ElementsAre("b"));
  }
}

TEST_F(DispatcherTest, OneOwnerPerJob) {
  auto d = Make({{"a", Behaviour::kOk}}, Options());
  ASSERT_TRUE(*store_.CompareAndSet(Dispatcher::StateKey("job-1", "render"), "", "attempt:1", 1h));
  const DispatchResult r = d->Run("job-1", "render", "frame 7");
  EXPECT_EQ(r.end, End::kClaimedElsewhere);
  EXPECT_THAT(r.reason, HasSubstr("owned by another consumer (attempt:1)"));
  EXPECT_TRUE(r.nodes.empty());
  // A job that ended is not run again either.
  ASSERT_EQ(d->Run("job-2", "render", "frame 7").end, End::kDone);
  const DispatchResult again = d->Run("job-2", "render", "frame 7");
  EXPECT_EQ(again.end, End::kClaimedElsewhere);
  EXPECT_THAT(again.reason, HasSubstr("job-2 step render already ended (done)"));
}

TEST_F(DispatcherTest, ARequeueRaceHasOneWinner) {
  auto d = Make({{"a", Behaviour::kRetryable}, {"b", Behaviour::kRetryable}}, Options());
  // While the first attempt runs, another consumer moves the job on.
  on_submit_ = [&](const std::string&) {
    (void)store_.CompareAndSet(Dispatcher::StateKey("job-1", "render"), "attempt:1", "attempt:2",
                               1h);
    on_submit_ = nullptr;
  };
  const DispatchResult r = d->Run("job-1", "render", "frame 7");
  EXPECT_EQ(r.end, End::kClaimedElsewhere);
  EXPECT_EQ(r.nodes.size(), 1u);  // it did not requeue as well
  EXPECT_EQ(store_.Get(Dispatcher::StateKey("job-1", "render"))->value(), "attempt:2");
}

TEST_F(DispatcherTest, NoNodesAtAll) {
  auto d = Make({}, Options());
  const DispatchResult r = d->Run("job-1", "render", "frame 7");
  EXPECT_EQ(r.end, End::kNoNode);
  EXPECT_THAT(r.reason, HasSubstr("no compute node can take the job"));
}

}  // namespace
}  // namespace drover::jobs
