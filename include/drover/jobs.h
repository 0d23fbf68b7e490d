// Job results (seed 001; JOB-1 .. JOB-9): how a backend learns what became of a step it handed to a
// compute node -- without ever mistaking a failure for "not ready yet".
//
// This header holds the parts that are pure logic:
//   - the result payload contract and its allow-list parser: `done` is success, `error` is a step
//     error, anything else is a protocol error -- nothing unknown is success (JOB-4);
//   - the classification every read goes through: NOT_READY (wait), TRANSIENT (wait),
//     TERMINAL (stop now) (JOB-3);
//   - the sanitizer for producer error text (JOB-9);
//   - the per-node circuit breaker that tells a failed job from a failed node (JOB-7).
// On top of it, over a ResultStore (Redis, or embedded in-process): the producer's
// PublishResult, the waiter, and the retry budget.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::router {
class RoutingTable;
struct Endpoint;
}  // namespace drover::router

namespace drover::jobs {

// --- The payload ------------------------------------------------------------------------------

// What a producer publishes for one step of one job, as JSON:
//   {"status": "done",  "content": "..."}                                  success
//   {"status": "error", "retryable": false, "message": "..."}              step error
// `retryable` (bool) and `message`/`content` (strings) are optional; any other member is ignored.
struct StepResult {
  enum class Status : std::uint8_t { kDone = 0, kError = 1 };
  Status status = Status::kDone;
  bool retryable = false;
  std::string message;  // for an error: the producer's text (sanitize before showing it)
  std::string content;  // for done: the result itself
};

// The JSON a producer writes for `result`.
std::string EncodeStepResult(const StepResult& result);

// What one stored value means.
struct Parsed {
  enum class Kind : std::uint8_t {
    kDone = 0,           // status "done"
    kStepError = 1,      // status "error": the job failed, the node did its work
    kProtocolError = 2,  // anything else: the contract is broken
  };
  Kind kind = Kind::kProtocolError;
  StepResult result;    // for kDone and kStepError
  std::string problem;  // for kProtocolError: what is wrong, without the raw payload
};

// The largest payload the parser reads; a larger one is a protocol error.
inline constexpr std::size_t kMaxPayloadBytes = 1 << 20;

// Positive allow-list parsing (JOB-4): a JSON object whose "status" is the string "done" or
// "error", with fields of the right types. Missing, non-string or unknown status, invalid JSON,
// a non-object, a wrong-typed field, or more than kMaxPayloadBytes: a protocol error.
Parsed ParseStepResult(std::string_view payload);

// --- Classification ---------------------------------------------------------------------------

// Every read of a result -- from a nudge or from the ticker -- goes through Classify (JOB-3).
enum class ReadClass : std::uint8_t {
  kNotReady = 0,   // the key is absent: keep waiting
  kTransient = 1,  // the store cannot answer now (unreachable, loading): keep waiting, reconnect
  kTerminal = 2,   // a value was read: stop now, whatever it says
};
std::string_view ReadClassName(ReadClass c);  // "NOT_READY", "TRANSIENT", "TERMINAL"

// One read: the store's answer. An OK status with no value is an absent key (not ready). A value
// is terminal -- done, step error or protocol error, never "not ready", so a value read
// destructively can never be lost to a retry loop. An error is transient when the store could
// not answer (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED); any other error
// (the key holds something that is not a result, ...) is terminal, a protocol error.
ReadClass Classify(const Result<std::optional<std::string>>& read);

// --- Sanitizer ----------------------------------------------------------------------------------

struct SanitizeOptions {
  std::size_t max_bytes = 512;  // of the output, "..." included
};

// Producer error text made fit for a user-facing field (JOB-9), in this order:
//   1. invalid UTF-8 repaired (each bad sequence becomes U+FFFD);
//   2. control characters, terminal escape sequences and bidi overrides/isolates removed (tab,
//      CR and LF become a space);
//   3. URLs and file paths redacted ("[url]", "[path]") -- before truncation, so a URL cut by the
//      limit cannot leak its first half;
//   4. truncated to max_bytes on a character boundary, ending in "...".
std::string SanitizeErrorText(std::string_view text, const SanitizeOptions& options = {});

// --- Result stores ------------------------------------------------------------------------------

// Ends a subscription when destroyed.
class Subscription {
 public:
  virtual ~Subscription() = default;
};

// Where results wait for their consumer (JOB-1): keys with TTLs, pub/sub, and two atomic steps.
// Errors: UNAVAILABLE (unreachable), ABORTED (loading) and DEADLINE_EXCEEDED are transient;
// FAILED_PRECONDITION means the key holds something else. Thread-safe.
class ResultStore {
 public:
  virtual ~ResultStore() = default;
  virtual Result<std::optional<std::string>> Get(const std::string& key) = 0;
  virtual Result<std::optional<std::string>> GetDel(const std::string& key) = 0;  // atomic
  virtual Status Del(const std::string& key) = 0;
  virtual Status Set(const std::string& key, const std::string& value, Duration ttl) = 0;
  virtual Status Publish(const std::string& channel, const std::string& message) = 0;
  // Calls `on_message` (on a store thread; keep it short) for each message published on
  // `channel` after Subscribe returned, until the Subscription is destroyed.
  virtual Result<std::unique_ptr<Subscription>> Subscribe(
      const std::string& channel, std::function<void(const std::string&)> on_message) = 0;
  // Increments the integer at `key` and sets its TTL, in one atomic step; the new value.
  virtual Result<std::int64_t> IncrementWithTtl(const std::string& key, Duration ttl) = 0;
  // Sets `key` to `to` (TTL `ttl`) only if it holds `from` ("" for absent); true if it did.
  virtual Result<bool> CompareAndSet(const std::string& key, const std::string& from,
                                     const std::string& to, Duration ttl) = 0;
};

// An in-process store (the demo, unit tests). TTLs run on `clock`. `SetAvailable(false)` makes
// every call fail UNAVAILABLE, as an unreachable server would.
class EmbeddedStore final : public ResultStore {
 public:
  explicit EmbeddedStore(Clock& clock);
  ~EmbeddedStore() override;

  Result<std::optional<std::string>> Get(const std::string& key) override;
  Result<std::optional<std::string>> GetDel(const std::string& key) override;
  Status Del(const std::string& key) override;
  Status Set(const std::string& key, const std::string& value, Duration ttl) override;
  Status Publish(const std::string& channel, const std::string& message) override;
  Result<std::unique_ptr<Subscription>> Subscribe(
      const std::string& channel, std::function<void(const std::string&)> on_message) override;
  Result<std::int64_t> IncrementWithTtl(const std::string& key, Duration ttl) override;
  Result<bool> CompareAndSet(const std::string& key, const std::string& from, const std::string& to,
                             Duration ttl) override;

  void SetAvailable(bool available);
  // The TTL left on `key`, if it exists and has one.
  std::optional<Duration> TtlOf(const std::string& key);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

struct RedisOptions {
  std::string address = "127.0.0.1:6379";  // host:port
  std::string password;                    // AUTH, when set
  Duration connect_timeout = std::chrono::seconds(1);
  Duration command_timeout = std::chrono::seconds(2);
  Duration backoff_initial = std::chrono::milliseconds(100);  // between reconnects, doubling
  Duration backoff_max = std::chrono::seconds(5);
};

// A ResultStore on a Redis server (6.2 or newer: GETDEL) through hiredis. Commands share one
// connection (calls are serialised); pub/sub has a connection and a thread of its own that
// re-subscribes after a reconnect. A lost connection is re-made on the next call, with back-off;
// until then calls fail UNAVAILABLE (transient). LOADING is ABORTED (transient too). The two
// atomic steps are Lua scripts, loaded once per connection and run by EVALSHA (reloaded after a
// server restart's NOSCRIPT).
class RedisStore final : public ResultStore {
 public:
  // Fails only for a bad address: the server may come up later.
  static Result<std::unique_ptr<RedisStore>> Open(RedisOptions options);
  ~RedisStore() override;

  Result<std::optional<std::string>> Get(const std::string& key) override;
  Result<std::optional<std::string>> GetDel(const std::string& key) override;
  Status Del(const std::string& key) override;
  Status Set(const std::string& key, const std::string& value, Duration ttl) override;
  Status Publish(const std::string& channel, const std::string& message) override;
  Result<std::unique_ptr<Subscription>> Subscribe(
      const std::string& channel, std::function<void(const std::string&)> on_message) override;
  Result<std::int64_t> IncrementWithTtl(const std::string& key, Duration ttl) override;
  Result<bool> CompareAndSet(const std::string& key, const std::string& from, const std::string& to,
                             Duration ttl) override;

  struct Impl;

 private:
  explicit RedisStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// --- Producer and waiter ------------------------------------------------------------------------

// Where the result of one step of one job lives, and where its nudge is published.
std::string ResultKey(const std::string& job_id, const std::string& step);
std::string NudgeChannel(const std::string& job_id, const std::string& step);

// Producer side (JOB-2): writes the result with its TTL in one SET, then publishes the nudge.
// The write comes first: a waiter woken by the nudge always finds the value. The nudge is best
// effort -- the write is what counts; a lost nudge costs a waiter at most one tick -- so only a
// failed write is an error.
Status PublishResult(ResultStore& store, const std::string& job_id, const std::string& step,
                     const StepResult& result, Duration ttl = std::chrono::hours(1));

enum class ReadMode : std::uint8_t {
  // GETDEL: the value is gone once read, so whatever it says is final -- the waiter never waits
  // again after a read returned a value.
  kDestructive = 0,
  // GET; the caller commits what it got, then calls Acknowledge (DEL). A waiter that dies in
  // between loses nothing: the next Wait reads the same value again.
  kAtLeastOnce = 1,
};

struct WaitOptions {
  ReadMode mode = ReadMode::kDestructive;
  Duration tick = std::chrono::seconds(1);     // poll period, nudge or not
  Duration timeout = std::chrono::minutes(5);  // the wait's hard ceiling
  SanitizeOptions sanitize;
  // At-least-once mode: whether the caller already committed the delivery with this id (a
  // waiter that died after its commit but before Acknowledge reads the same value again). When
  // it says yes, the value is removed and the outcome is marked `duplicate`: nothing to do.
  std::function<bool(const std::string& delivery_id)> already_committed;
};

struct WaitOutcome {
  enum class Kind : std::uint8_t {
    kDone = 0,
    kStepError = 1,      // the producer says the step failed: `message` is its sanitized text
    kProtocolError = 2,  // a value that breaks the contract: `message` says how
    kTimeout = 3,        // nothing final by the ceiling: `message` says what was last seen
    kCancelled = 4,
  };
  Kind kind = Kind::kTimeout;
  std::string content;     // kDone
  std::string message;     // see Kind
  bool retryable = false;  // kStepError: the producer's word
  ReadClass last_seen = ReadClass::kNotReady;
  int reads = 0;        // reads done, nudged or ticked
  bool nudged = false;  // the final read followed a nudge
  Duration waited{};
  // kDone, kStepError, kProtocolError: identifies the value read (a hash of it), for the
  // caller's idempotent commit in at-least-once mode.
  std::string delivery_id;
  bool duplicate = false;  // at-least-once: already committed (see WaitOptions); removed now
};
std::string_view WaitOutcomeName(WaitOutcome::Kind kind);  // "done", "step_error", ...

// Waits for the result of `step` of `job_id` (JOB-3, JOB-5): subscribes to its nudge, reads
// once at once, then on every nudge and every `tick`, until a read is terminal, the timeout
// passes, or `stop` is requested. Every read goes through Classify.
WaitOutcome Wait(ResultStore& store, Clock& clock, const std::string& job_id,
                 const std::string& step, const WaitOptions& options, std::stop_token stop = {});

// At-least-once mode: after the caller committed the outcome, removes the result.
Status Acknowledge(ResultStore& store, const std::string& job_id, const std::string& step);

// --- Retry budget -------------------------------------------------------------------------------

// How many times one step of one job may be retried (JOB-6). The counter is
// `retry:{job_id}:{step}`, counted and given its TTL in one atomic step; the TTL is twice the
// hard ceiling of one wait, so a counter never outlives the job nor expires while it runs.
// `job_id` is the enqueue id and `step` the compute step actually run.
class RetryBudget {
 public:
  RetryBudget(ResultStore& store, std::string job_id, std::string step, int max_retries,
              Duration wait_ceiling);
  // True when one more retry may run (and counts it): a budget of N allows exactly N. False
  // when it is spent -- or when the store cannot count: a job whose retries cannot be counted
  // must not retry, or it might retry forever.
  bool Allow();
  std::string key() const;

 private:
  ResultStore& store_;
  std::string job_id_;
  std::string step_;
  int max_retries_;
  Duration ttl_;
};

// --- Circuit breaker --------------------------------------------------------------------------

struct BreakerOptions {
  int failure_threshold = 5;  // consecutive breaker failures that open it
  Duration open_for = std::chrono::seconds(10);
  int half_open_probes = 1;  // calls let through at once while half-open
  // A probe that has not reported within this is presumed failed and its slot reclaimed, so a
  // lost probe can never wedge the breaker half-open.
  Duration probe_max_wait = std::chrono::seconds(30);
};

// How a call through the breaker ended.
enum class CallOutcome : std::uint8_t {
  kSuccess = 0,
  kStepError = 1,       // the node answered with a step error: the node is fine (not a failure)
  kProtocolError = 2,   // the node broke the contract: a failure
  kTransportError = 3,  // unreachable, timed out, crashed: a failure
  kCancelled = 4,       // the caller gave up: neither success nor failure
};

// One breaker per compute node (JOB-7). Thread-safe.
//   closed:    every call goes; `failure_threshold` failures in a row open it.
//   open:      no call goes, for `open_for`; then half-open.
//   half-open: up to `half_open_probes` calls go, as probes. A probe's success or step error
//              closes the breaker; its failure opens it again; its cancellation just frees its
//              slot. Only a probe's own report can free its slot or decide the state: a call
//              that started in an earlier state reports into nothing.
class CircuitBreaker {
 public:
  enum class State : std::uint8_t { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

  // A call's ticket: pass it back to Report exactly once.
  struct Permit {
    std::uint64_t epoch = 0;  // the state the call started in
    std::uint64_t probe = 0;  // its probe slot while half-open (0: not a probe)
  };

  CircuitBreaker(BreakerOptions options, Clock& clock);

  // A permit when a call may go now; nullopt when the breaker is open or every probe slot of the
  // half-open state is taken.
  std::optional<Permit> TryAcquire();
  void Report(const Permit& permit, CallOutcome outcome);

  State state();
  int probes_in_flight();

 private:
  void Transition(State to);  // mu_ held
  void Tick();                // mu_ held: open -> half-open, expired probes reclaimed

  const BreakerOptions options_;
  Clock& clock_;
  std::mutex mu_;
  State state_ = State::kClosed;
  std::uint64_t epoch_ = 1;
  int failures_ = 0;
  MonoTime opened_at_{};
  std::uint64_t next_probe_ = 1;
  struct Probe {
    std::uint64_t id = 0;
    MonoTime started{};
  };
  std::vector<Probe> probes_;
};

std::string_view BreakerStateName(CircuitBreaker::State s);  // "closed", "open", "half-open"

// --- Dispatcher -------------------------------------------------------------------------------

// Where compute nodes come from: a routing table of the compute service (a DiscoveryClient's
// snapshot: READY and accepting instances are Routable()).
using NodeSource = std::function<Result<std::shared_ptr<const router::RoutingTable>>()>;
// Hands one step of one job to one node. An error is a transport failure (the node did not take
// it); the node's answer comes later, through the ResultStore.
using Submit = std::function<Status(const router::Endpoint& node, const std::string& job_id,
                                    const std::string& step, const std::string& payload)>;

struct DispatchOptions {
  int max_retries = 2;  // attempts after the first, shared by every consumer of the job (JOB-6)
  WaitOptions wait;     // each attempt's wait; its timeout is the budget's hard ceiling
  BreakerOptions breaker;
  Duration state_ttl = std::chrono::hours(24);  // of the job's state key
};

struct DispatchResult {
  enum class End : std::uint8_t {
    kDone = 0,
    kFailed = 1,            // a step error that is final, or the budget is spent
    kNoNode = 2,            // no node (or no other node, for a retry) can take it
    kClaimedElsewhere = 3,  // another consumer owns the job, or moved it on first
    kCancelled = 4,
  };
  End end = End::kFailed;
  std::string reason;              // user-facing: sanitized, never a raw payload
  WaitOutcome last;                // the last attempt's wait
  std::vector<std::string> nodes;  // tried, in order
};
std::string_view DispatchEndName(DispatchResult::End end);

// Runs one step of one job on the compute service (JOB-7, JOB-8): claims the job by
// compare-and-set on `job:{id}:step` ("" -> "attempt:1"), picks a node by P2C over in-flight
// calls among routable nodes whose breaker lets a call through, submits, and waits for the
// result. A final step error ends it; a retryable step error, a protocol error, a timeout or a
// transport failure retries -- on a node not tried yet, within the retry budget, after moving
// the state on by compare-and-set ("attempt:n" -> "attempt:n+1"), so two consumers can never both
// requeue, nor both give up. The end is written the same way ("done", "failed", "cancelled").
// Thread-safe: any number of jobs at once share the breakers and the in-flight counts.
class Dispatcher {
 public:
  Dispatcher(ResultStore& store, NodeSource nodes, Submit submit, Clock& clock,
             DispatchOptions options = {});
  ~Dispatcher();

  DispatchResult Run(const std::string& job_id, const std::string& step, const std::string& payload,
                     std::stop_token stop = {});

  CircuitBreaker::State BreakerState(const std::string& node_id);

  // The key of a job step's state.
  static std::string StateKey(const std::string& job_id, const std::string& step);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::jobs
