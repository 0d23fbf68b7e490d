// Fault injection: a real redis-server (append-only file, fsync per write) is SIGKILLed and
// started again on the same port and directory while job-result waiters (drover/jobs.h, Wait in
// at-least-once mode) wait on it:
//   - results published before the kill, read only after the restart;
//   - waiters already waiting at the kill, whose results are published after the restart;
//   - results a consumer read and committed before the kill but never acknowledged (it "died"
//     between commit and Acknowledge): after the restart they come again with the same delivery
//     id, and the waiter marks them duplicates instead of delivering them twice.
// Checked: no waiter hangs -- each returns within a bound with its job's own terminal result;
// no published result is lost; nothing is committed twice; every result is gone once
// acknowledged.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "drover/jobs.h"
#include "testing/eventually.h"
#include "testing/redis_server.h"
#include "testing/temp_dir.h"

namespace drover::jobs {
namespace {

using namespace std::chrono_literals;
using Kind = WaitOutcome::Kind;
using SteadyClock = std::chrono::steady_clock;

constexpr char kStep[] = "render";
constexpr auto kWaitTimeout = 20s;  // each Wait's own ceiling (a documented kTimeout outcome)
constexpr auto kHangBound = 25s;    // from the restart: past it a waiter counts as hung

// Even jobs succeed, odd ones fail: both are terminal and must come back exactly as published.
StepResult ResultOf(const std::string& job, int index) {
  StepResult r;
  if (index % 2 == 0) {
    r.status = StepResult::Status::kDone;
    r.content = "frames of " + job;
  } else {
    r.status = StepResult::Status::kError;
    r.message = "out of memory rendering " + job;
  }
  return r;
}

// The consumer's own database: every commit, by job.
class Ledger {
 public:
  bool Has(const std::string& job, const std::string& delivery_id) {
    std::lock_guard lock(mu_);
    auto it = committed_.find(job);
    if (it == committed_.end()) return false;
    for (const WaitOutcome& o : it->second) {
      if (o.delivery_id == delivery_id) return true;
    }
    return false;
  }
  void Commit(const std::string& job, const WaitOutcome& out) {
    std::lock_guard lock(mu_);
    committed_[job].push_back(out);
  }
  std::map<std::string, std::vector<WaitOutcome>> Snapshot() {
    std::lock_guard lock(mu_);
    return committed_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<WaitOutcome>> committed_;  // guarded by mu_
};

struct Consumed {
  std::string job;
  WaitOutcome outcome;
  bool acknowledged = false;
  SteadyClock::time_point returned;
};

// One consumer: wait, commit (unless a duplicate), acknowledge (retried: the store may be down
// for a moment) unless told to "die" between commit and acknowledge.
Consumed Consume(ResultStore& store, Ledger& ledger, const std::string& job, bool acknowledge,
                 std::stop_token stop) {
  RealClock clock;
  WaitOptions o;
  o.mode = ReadMode::kAtLeastOnce;
  o.tick = 100ms;
  o.timeout = kWaitTimeout;
  o.already_committed = [&ledger, job](const std::string& id) { return ledger.Has(job, id); };
  Consumed c;
  c.job = job;
  c.outcome = Wait(store, clock, job, kStep, o, stop);
  const Kind kind = c.outcome.kind;
  if (kind == Kind::kDone || kind == Kind::kStepError || kind == Kind::kProtocolError) {
    if (!c.outcome.duplicate) ledger.Commit(job, c.outcome);
    if (acknowledge) {
      c.acknowledged =
          testing::Eventually([&] { return Acknowledge(store, job, kStep).ok(); }, 10s, 50ms);
    }
  }
  c.returned = SteadyClock::now();
  return c;
}

std::unique_ptr<RedisStore> OpenStore(const testing::RedisServer& redis) {
  RedisOptions o;
  o.address = redis.address();
  o.backoff_initial = 20ms;
  o.backoff_max = 200ms;
  auto store = RedisStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

TEST(RedisRestartTest, NoWaiterHangsAndNoResultIsLostAcrossARedisRestart) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  testing::RedisServer redis(dir.path(), /*durable=*/true);
  ASSERT_TRUE(redis.started()) << "redis-server did not start";
  auto consumers = OpenStore(redis);
  auto producer = OpenStore(redis);
  ASSERT_TRUE(consumers && producer);

  std::vector<std::string> before, after, unacked;
  for (int i = 0; i < 4; ++i) before.push_back("before-" + std::to_string(i));
  for (int i = 0; i < 4; ++i) after.push_back("after-" + std::to_string(i));
  for (int i = 0; i < 2; ++i) unacked.push_back("unacked-" + std::to_string(i));
  std::map<std::string, StepResult> published;
  std::map<std::string, int> index_of;
  for (const auto* group : {&before, &after, &unacked}) {
    for (std::size_t i = 0; i < group->size(); ++i) index_of[(*group)[i]] = static_cast<int>(i);
  }
  auto publish = [&](const std::string& job) {
    const StepResult r = ResultOf(job, index_of[job]);
    const bool ok = testing::Eventually(
        [&] { return PublishResult(*producer, job, kStep, r, 10min).ok(); }, 10s, 20ms);
    if (ok) published[job] = r;
    return ok;
  };

  // Before the kill: results nobody reads yet, and results read and committed but never
  // acknowledged.
  for (const auto& job : before) ASSERT_TRUE(publish(job));
  for (const auto& job : unacked) ASSERT_TRUE(publish(job));
  Ledger ledger;
  std::stop_source cancel;
  std::vector<std::future<Consumed>> first_reads;
  for (const auto& job : unacked) {
    first_reads.push_back(std::async(std::launch::async, Consume, std::ref(*consumers),
                                     std::ref(ledger), job, false, cancel.get_token()));
  }
  for (auto& f : first_reads) {
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
    const Consumed c = f.get();
    ASSERT_FALSE(c.outcome.duplicate);
    ASSERT_FALSE(c.outcome.delivery_id.empty()) << c.outcome.message;
  }
  // Waiters already waiting when Redis dies.
  std::vector<std::future<Consumed>> waiting;
  for (const auto& job : after) {
    waiting.push_back(std::async(std::launch::async, Consume, std::ref(*consumers),
                                 std::ref(ledger), job, true, cancel.get_token()));
  }
  std::this_thread::sleep_for(300ms);  // subscribed and ticking

  redis.Kill();
  // Waiters that start while Redis is down: for the results published before, and the
  // unacknowledged ones again.
  for (const auto* group : {&before, &unacked}) {
    for (const auto& job : *group) {
      waiting.push_back(std::async(std::launch::async, Consume, std::ref(*consumers),
                                   std::ref(ledger), job, true, cancel.get_token()));
    }
  }
  std::this_thread::sleep_for(1s);  // every read meanwhile is TRANSIENT, never an answer
  ASSERT_TRUE(redis.Start()) << "redis-server did not come back";
  const SteadyClock::time_point restarted = SteadyClock::now();
  std::map<std::string, SteadyClock::time_point> published_at;
  for (const auto& job : after) {
    ASSERT_TRUE(publish(job)) << "could not publish " << job << " after the restart";
    published_at[job] = SteadyClock::now();
  }

  // Every waiter returns within the bound; past it, it is cancelled and counted as hung.
  int hung = 0;
  std::vector<Consumed> results;
  for (auto& f : waiting) {
    if (f.wait_until(restarted + kHangBound) != std::future_status::ready) {
      ++hung;
      cancel.request_stop();
    }
    results.push_back(f.get());
  }

  int wrong = 0, timeouts = 0, duplicates = 0, not_acknowledged = 0;
  double slowest_after_publish_ms = 0;
  for (const Consumed& c : results) {
    SCOPED_TRACE(c.job);
    const StepResult& want = published[c.job];
    const Kind kind = c.outcome.kind;
    if (kind == Kind::kTimeout || kind == Kind::kCancelled) {
      ++timeouts;
      ADD_FAILURE() << c.job << ": " << WaitOutcomeName(kind) << ": " << c.outcome.message;
      continue;
    }
    const bool right = want.status == StepResult::Status::kDone
                           ? kind == Kind::kDone && c.outcome.content == want.content
                           : kind == Kind::kStepError && c.outcome.message == want.message;
    if (!right) {
      ++wrong;
      ADD_FAILURE() << c.job << ": got " << WaitOutcomeName(kind) << " '" << c.outcome.content
                    << c.outcome.message << "'";
    }
    duplicates += c.outcome.duplicate;
    not_acknowledged += !c.acknowledged;
    if (auto it = published_at.find(c.job); it != published_at.end()) {
      slowest_after_publish_ms =
          std::max(slowest_after_publish_ms,
                   std::chrono::duration<double, std::milli>(c.returned - it->second).count());
    }
  }
  // Lost: a published result no consumer committed. Twice: committed under two delivery ids.
  const auto committed = ledger.Snapshot();
  int lost = 0, committed_twice = 0, left_in_redis = 0;
  for (const auto& [job, result] : published) {
    auto it = committed.find(job);
    if (it == committed.end() || it->second.empty()) {
      ++lost;
      ADD_FAILURE() << job << ": published, never delivered";
    } else if (it->second.size() > 1) {
      ++committed_twice;
      ADD_FAILURE() << job << ": committed " << it->second.size() << " times";
    }
    const auto left = producer->Get(ResultKey(job, kStep));
    left_in_redis += !left.ok() || left->has_value();
  }

  std::printf(
      "redis restart: redis-server SIGKILLed with %zu waiters waiting or starting, restarted on "
      "the same port and append-only file after 1 s; %zu results published (%zu before the "
      "kill, %zu after the restart), %zu delivered and committed, %d lost, %d committed twice, "
      "%d hung waiters, %d timeouts, %d wrong results, %d duplicates flagged (of %zu read but "
      "unacknowledged before the kill), %d unacknowledged, %d results left in Redis; slowest "
      "waiter after its result was published: %.0f ms\n",
      waiting.size(), published.size(), before.size() + unacked.size(), after.size(),
      committed.size(), lost, committed_twice, hung, timeouts, wrong, duplicates, unacked.size(),
      not_acknowledged, left_in_redis, slowest_after_publish_ms);
  EXPECT_EQ(hung, 0);
  EXPECT_EQ(timeouts, 0);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(committed_twice, 0);
  EXPECT_EQ(duplicates, static_cast<int>(unacked.size()))
      << "a result committed before the kill came back and was not recognised";
  EXPECT_EQ(not_acknowledged, 0);
  EXPECT_EQ(left_in_redis, 0);
}

}  // namespace
}  // namespace drover::jobs
