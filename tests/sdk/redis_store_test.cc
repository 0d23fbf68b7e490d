// Job results on a real redis-server (JOB-1 .. JOB-6): the store's commands and scripts, every
// payload classified in both read modes, a failure seen the moment its nudge arrives and within
// one tick without it, a Redis restart in the middle of a wait, a waiter SIGKILLed between its
// read and its delete, and a retry budget under concurrent use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <iostream>
#include <thread>

#include "drover/jobs.h"
#include "testing/eventually.h"
#include "testing/line_client.h"
#include "testing/redis_server.h"
#include "testing/temp_dir.h"

namespace drover::jobs {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Kind = WaitOutcome::Kind;

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_.started()) << "redis-server did not start";
    store_ = Open();
  }

  std::unique_ptr<RedisStore> Open() const {
    RedisOptions o;
    o.address = redis_.address();
    o.backoff_initial = 20ms;
    o.backoff_max = 200ms;
    auto s = RedisStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }

  // A raw command through a plain socket (inline protocol), for what the store does not expose.
  std::string Raw(const std::string& command) const {
    return testing::LineClient(redis_.port()).Ask(command).value_or("");
  }

  static StepResult Failed(std::string message) {
    StepResult r;
    r.status = StepResult::Status::kError;
    r.message = std::move(message);
    return r;
  }

  testing::TempDir dir_;
  testing::RedisServer redis_{dir_.path()};
  RealClock clock_;
  std::unique_ptr<RedisStore> store_;
};

TEST_F(RedisStoreTest, CommandsAndScripts) {
  EXPECT_FALSE(store_->Get("k")->has_value());
  ASSERT_TRUE(store_->Set("k", std::string("v\0w", 3), 10s).ok());
  EXPECT_EQ(store_->Get("k")->value(), std::string("v\0w", 3));  // binary-safe
  const int pttl = std::stoi(Raw("PTTL k").substr(1));
  EXPECT_GT(pttl, 9000);
  EXPECT_LE(pttl, 10000);
  EXPECT_EQ(store_->GetDel("k")->value(), std::string("v\0w", 3));
  EXPECT_FALSE(store_->GetDel("k")->has_value());
  ASSERT_TRUE(store_->Set("d", "x", 0s).ok());
  ASSERT_TRUE(store_->Del("d").ok());
  EXPECT_FALSE(store_->Get("d")->has_value());

  EXPECT_EQ(*store_->IncrementWithTtl("n", 5s), 1);
  EXPECT_EQ(*store_->IncrementWithTtl("n", 5s), 2);
  EXPECT_GT(std::stoi(Raw("PTTL n").substr(1)), 0);

  EXPECT_TRUE(*store_->CompareAndSet("job", "", "queued", 10s));
  EXPECT_FALSE(*store_->CompareAndSet("job", "", "queued", 10s));
  EXPECT_TRUE(*store_->CompareAndSet("job", "queued", "running", 10s));
  EXPECT_FALSE(*store_->CompareAndSet("job", "queued", "failed", 10s));
  EXPECT_EQ(store_->Get("job")->value(), "running");

  // A key that holds something else: a broken contract, not "try later".
  ASSERT_EQ(Raw("LPUSH l x"), ":1");
  const auto wrong = store_->Get("l");
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Classify(wrong), ReadClass::kTerminal);
}

TEST_F(RedisStoreTest, EveryStoredPayloadIsFinalInBothModes) {
  const std::vector<std::pair<std::string, Kind>> values = {
      {R"({"status":"done","content":"x"})", Kind::kDone},
      {R"({"status":"error","message":"m","retryable":true})", Kind::kStepError},
      {"{}", Kind::kProtocolError},
      {R"({"status":1})", Kind::kProtocolError},
      {R"({"status":"weird"})", Kind::kProtocolError},
      {R"({"status":null})", Kind::kProtocolError},
      {R"({"status":"do)", Kind::kProtocolError},
      {"", Kind::kProtocolError},
      {std::string("\x00\xff\xfe junk", 8), Kind::kProtocolError},
      {"[1,2]", Kind::kProtocolError},
      {R"("done")", Kind::kProtocolError},
      {R"({"status":"DONE"})", Kind::kProtocolError},
      {R"({"status":"error","retryable":"yes"})", Kind::kProtocolError},
      {R"({"status":"done","content":7})", Kind::kProtocolError},
      {"{\"status\":\"done\",\"content\":\"\xc3\x28\"}", Kind::kProtocolError},
      {R"({"status":"done"})", Kind::kDone},
      {R"({"status":"done","content":")" + std::string(2 << 20, 'x') + "\"}", Kind::kProtocolError},
  };
  ASSERT_GE(values.size(), 15u);
  WaitOptions o;
  o.tick = 50ms;
  o.timeout = 5s;
  for (const ReadMode mode : {ReadMode::kDestructive, ReadMode::kAtLeastOnce}) {
    o.mode = mode;
    for (const auto& [value, want] : values) {
      SCOPED_TRACE(value.substr(0, 40));
      ASSERT_TRUE(store_->Set(ResultKey("j", "s"), value, 1min).ok());
      const WaitOutcome out = Wait(*store_, clock_, "j", "s", o);
      EXPECT_EQ(out.kind, want) << out.message;
      EXPECT_EQ(out.reads, 1);
      EXPECT_EQ(store_->Get(ResultKey("j", "s"))->has_value(), mode == ReadMode::kAtLeastOnce);
      ASSERT_TRUE(Acknowledge(*store_, "j", "s").ok());
    }
  }
}

TEST_F(RedisStoreTest, AFailureIsTerminalOnItsNudgeAndWithinOneTickWithout) {
  WaitOptions o;
  o.tick = 500ms;
  o.timeout = 20s;
  // The nudge path.
  auto waiting =
      std::async(std::launch::async, [&] { return Wait(*store_, clock_, "j1", "s", o); });
  std::this_thread::sleep_for(200ms);  // subscribed and asleep
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(PublishResult(*store_, "j1", "s", Failed("CUDA error at /opt/k.cu:9")).ok());
  WaitOutcome out = waiting.get();
  const double nudge_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(out.kind, Kind::kStepError);
  EXPECT_EQ(out.message, "CUDA error at [path]");
  EXPECT_TRUE(out.nudged);
  // The ticker path: written without a nudge.
  waiting = std::async(std::launch::async, [&] { return Wait(*store_, clock_, "j2", "s", o); });
  std::this_thread::sleep_for(200ms);
  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(store_->Set(ResultKey("j2", "s"), EncodeStepResult(Failed("boom")), 1min).ok());
  out = waiting.get();
  const double tick_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(out.kind, Kind::kStepError);
  EXPECT_FALSE(out.nudged);
  std::cout << "failure notice to terminal result: nudge path " << nudge_ms << " ms, ticker path "
            << tick_ms << " ms (tick 500 ms)\n";
}

TEST_F(RedisStoreTest, ARedisRestartInTheMiddleOfAWaitIsWaitedOut) {
  WaitOptions o;
  o.tick = 100ms;
  o.timeout = 30s;
  auto waiting = std::async(std::launch::async, [&] { return Wait(*store_, clock_, "j", "s", o); });
  std::this_thread::sleep_for(300ms);
  redis_.Kill();
  std::this_thread::sleep_for(500ms);  // reads fail meanwhile: TRANSIENT, not an answer
  ASSERT_TRUE(redis_.Start());
  auto producer = Open();
  ASSERT_TRUE(testing::Eventually(
      [&] { return PublishResult(*producer, "j", "s", Failed("late")).ok(); }, 10s, 20ms));
  const WaitOutcome out = waiting.get();
  EXPECT_EQ(out.kind, Kind::kStepError);
  EXPECT_EQ(out.message, "late");
  // And the scripts came back with the server (NOSCRIPT -> reloaded).
  EXPECT_EQ(*store_->IncrementWithTtl("after-restart", 5s), 1);
}

TEST_F(RedisStoreTest, SubscriptionsComeBackAfterARestart) {
  std::atomic<int> got{0};
  auto sub = store_->Subscribe("ch", [&](const std::string& m) { got += m == "hi" ? 1 : 0; });
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(store_->Publish("ch", "hi").ok());
  ASSERT_TRUE(testing::Eventually([&] { return got.load() == 1; }, 5s));
  redis_.Kill();
  ASSERT_TRUE(redis_.Start());
  ASSERT_TRUE(testing::Eventually(
      [&] { return store_->Publish("ch", "hi").ok() && got.load() >= 2; }, 10s, 50ms));
  sub->reset();  // unsubscribed: nothing more arrives
  const int before = got.load();
  ASSERT_TRUE(store_->Publish("ch", "hi").ok());
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(got.load(), before);
}

TEST_F(RedisStoreTest, AWaiterKilledBetweenItsReadAndItsDeleteLosesNothing) {
  ASSERT_TRUE(PublishResult(*store_, "j", "s", Failed("disk full")).ok());
  int ids[2];
  ASSERT_EQ(::pipe(ids), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    RedisOptions ro;
    ro.address = redis_.address();
    auto store = RedisStore::Open(ro);
    RealClock clock;
    WaitOptions o;
    o.mode = ReadMode::kAtLeastOnce;
    o.timeout = 5s;
    const WaitOutcome out = Wait(**store, clock, "j", "s", o);
    (void)!::write(ids[1], out.delivery_id.data(), out.delivery_id.size());
    ::raise(SIGKILL);  // after the read, before the commit and the delete
  }
  ::close(ids[1]);
  char buf[64] = {};
  const ssize_t n = ::read(ids[0], buf, sizeof buf);
  ::close(ids[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_GT(n, 0);
  WaitOptions o;
  o.mode = ReadMode::kAtLeastOnce;
  o.timeout = 5s;
  const WaitOutcome again = Wait(*store_, clock_, "j", "s", o);
  EXPECT_EQ(again.kind, Kind::kStepError);
  EXPECT_EQ(again.message, "disk full");
  EXPECT_EQ(again.delivery_id, std::string(buf, static_cast<std::size_t>(n)));
  ASSERT_TRUE(Acknowledge(*store_, "j", "s").ok());
  EXPECT_FALSE(store_->Get(ResultKey("j", "s"))->has_value());
}

TEST_F(RedisStoreTest, EightThreadsShareABudgetOfFiveExactly) {
  std::atomic<int> granted{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        auto store = Open();  // a connection each: real concurrency at the server
        RetryBudget budget(*store, "job-7", "render", 5, 30s);
        for (int i = 0; i < 10; ++i) granted += budget.Allow() ? 1 : 0;
      });
    }
  }
  EXPECT_EQ(granted.load(), 5);
  const int pttl = std::stoi(Raw("PTTL retry:{job-7}:render").substr(1));
  EXPECT_GT(pttl, 0);  // the key always has its TTL
  EXPECT_LE(pttl, 60000);
}

TEST_F(RedisStoreTest, AnUnreachableServerIsTransient) {
  redis_.Kill();
  const auto read = store_->Get("k");
  EXPECT_EQ(Classify(read), ReadClass::kTransient) << read.status().ToString();
  EXPECT_THAT(read.status().message(), HasSubstr("redis at " + redis_.address()));
  RetryBudget budget(*store_, "j", "s", 3, 1s);
  EXPECT_FALSE(budget.Allow());  // cannot count: no retry
}

}  // namespace
}  // namespace drover::jobs
