// Seed 001 end to end: a registry, Redis and compute_worker processes; a Dispatcher finds the
// workers through the DiscoveryClient, submits over TCP and waits on Redis. A failed job is
// reported failed -- with its sanitized message -- as soon as its notice lands, never "in
// progress"; broken and crashing workers are retried around and their breakers open; a
// worker's step errors never count against it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iostream>

#include "compute_protocol.h"
#include "drover/discovery.h"
#include "drover/jobs.h"
#include "drover/router.h"
#include "testing/child_process.h"
#include "testing/redis_server.h"
#include "testing/registry_process.h"
#include "testing/temp_dir.h"

namespace drover::jobs {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using ::testing::HasSubstr;
using ::testing::Not;
using End = DispatchResult::End;

class ComputeWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_.started());
    registry_ = drover::testing::StartRegistryProcess(
        DROVER_BINARY,
        {"--data-dir", dir_.path() + "/r", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
    ASSERT_NE(registry_.grpc, 0) << registry_.line;
    grpc_ = registry_.grpc_address();
    RedisOptions ro;
    ro.address = redis_.address();
    store_ = RedisStore::Open(ro).value();
  }

  // Starts a worker and waits until it serves.
  void Worker(const std::string& id, const std::string& mode) {
    auto w = std::make_unique<ChildProcess>(std::vector<std::string>{
        COMPUTE_WORKER_BINARY, "--registry", grpc_, "--id", id, "--listen", "127.0.0.1:0",
        "--health", "127.0.0.1:0", "--redis", redis_.address(), "--mode", mode, "--work-ms", "20",
        "--log-level", "warn"});
    const auto line = w->ReadLine(20s);
    ASSERT_TRUE(line && line->find("serving at") != std::string::npos) << line.value_or("EOF");
    workers_.push_back(std::move(w));
  }

  // A Dispatcher over the discovered workers, once `n` of them are routable.
  std::unique_ptr<Dispatcher> Dispatch(std::size_t n) {
    DiscoveryOptions o;
    o.registry = grpc_;
    o.service = "compute";
    discovery_ = DiscoveryClient::Start(o, clock_).value();
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto snap = discovery_->Snapshot();
      std::size_t routable = 0;
      if (snap.ok()) {
        for (const auto& e : snap->table->endpoints()) routable += e.Routable() ? 1 : 0;
      }
      if (routable == n) break;
      std::this_thread::sleep_for(20ms);
    }
    DispatchOptions options;
    options.max_retries = 3;
    options.wait.tick = 200ms;
    options.wait.timeout = 2s;
    options.breaker.failure_threshold = 1;
    options.breaker.open_for = 1h;
    return std::make_unique<Dispatcher>(
        *store_,
        [this]() -> Result<std::shared_ptr<const router::RoutingTable>> {
          DROVER_ASSIGN_OR_RETURN(DiscoverySnapshot snap, discovery_->Snapshot());
          return snap.table;
        },
        [](const router::Endpoint& node, const std::string& job, const std::string& step,
           const std::string& payload) {
          return examples::SubmitJob(node.address, job, step, payload);
        },
        clock_, options);
  }

  testing::TempDir dir_;
  testing::RedisServer redis_{dir_.path()};
  drover::testing::RegistryProcess registry_;
  std::string grpc_;
  RealClock clock_;
  std::unique_ptr<RedisStore> store_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<DiscoveryClient> discovery_;
};

TEST_F(ComputeWorkerTest, AFailedJobIsReportedFailedAtOnceWithItsSanitizedMessage) {
  Worker("w-fail", "step_error");
  auto d = Dispatch(1);
  const auto t0 = std::chrono::steady_clock::now();
  const DispatchResult r = d->Run("job-1", "render", "frame-1");
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.end, End::kFailed) << r.reason;
  EXPECT_EQ(r.reason, "scene invalid: texture [path] missing (see [url])");
  EXPECT_THAT(r.reason, Not(HasSubstr("/srv/")));
  EXPECT_TRUE(r.last.nudged);
  EXPECT_EQ(r.nodes.size(), 1u);  // a final step error: no retry
  EXPECT_EQ(d->BreakerState("w-fail"), CircuitBreaker::State::kClosed);
  std::cout << "failed job reported after " << ms << " ms (20 ms of work; tick 200 ms)\n";
}

TEST_F(ComputeWorkerTest, BrokenAndCrashingWorkersAreRetriedAroundAndTheirBreakersOpen) {
  Worker("w-ok", "ok");
  Worker("w-retry", "retryable");
  Worker("w-garbage", "garbage");
  Worker("w-crash", "crash");
  auto d = Dispatch(4);
  std::map<std::string, int> first_picks;
  for (int i = 0; i < 30; ++i) {
    const DispatchResult r = d->Run("job-" + std::to_string(i), "render", "frame");
    ASSERT_EQ(r.end, End::kDone) << r.reason;
    EXPECT_EQ(r.nodes.back(), "w-ok");
    EXPECT_THAT(r.last.content, HasSubstr("w-ok did frame"));
    ++first_picks[r.nodes.front()];
    if (d->BreakerState("w-garbage") == CircuitBreaker::State::kOpen &&
        d->BreakerState("w-crash") == CircuitBreaker::State::kOpen && first_picks["w-retry"] > 0) {
      break;
    }
  }
  EXPECT_EQ(d->BreakerState("w-garbage"), CircuitBreaker::State::kOpen);  // broke the contract
  EXPECT_EQ(d->BreakerState("w-crash"), CircuitBreaker::State::kOpen);    // never answered
  EXPECT_EQ(d->BreakerState("w-retry"), CircuitBreaker::State::kClosed);  // did its work
}

}  // namespace
}  // namespace drover::jobs
