// The producer's PublishResult, the waiter and the retry budget (include/drover/jobs.h).
#include <spdlog/spdlog.h>

#include <cstdio>

#include "common/text.h"
#include "drover/jobs.h"
#include "drover/mutex.h"

namespace drover::jobs {
namespace {

std::string SecondsText(Duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

// FNV-1a, 64 bits, as hex: the id of one delivered value.
std::string DeliveryId(std::string_view value) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : value) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Nudges wake the waiter's sleep: each sleep gets a fresh stop_source the callback can trip.
struct Wake {
  Mutex mu;
  std::stop_source current DROVER_GUARDED_BY(mu);
  bool pending DROVER_GUARDED_BY(mu) = false;
};

// Sleeps until `until`, a nudge or `stop`, and says whether a nudge came. A nudge that came
// while the waiter read ends it at once, without sleeping.
bool SleepUntilNudged(Wake& wake, Clock& clock, MonoTime until, std::stop_token stop) {
  std::stop_source sleep;
  {
    MutexLock lock(wake.mu);
    if (wake.pending) {  // a nudge came while we read: read again now
      wake.pending = false;
      return true;
    }
    wake.current = sleep;
  }
  std::stop_callback forward(stop, [&sleep] { sleep.request_stop(); });
  clock.SleepUntil(until, sleep.get_token());
  MutexLock lock(wake.mu);
  const bool nudged = wake.pending;
  wake.pending = false;
  return nudged;
}

// Fills `out` from a terminal read: the step's result, or why there is none. At least once, a
// value whose delivery was committed before is removed now.
void TakeTerminal(ResultStore& store, const std::string& key, const std::string& job_id,
                  const std::string& step, const WaitOptions& options,
                  const Result<std::optional<std::string>>& read, WaitOutcome& out) {
  if (!read.ok()) {
    out.kind = WaitOutcome::Kind::kProtocolError;
    out.message = "cannot read the result: " + read.status().message();
    return;
  }
  const std::string& value = **read;
  out.delivery_id = DeliveryId(value);
  const Parsed parsed = ParseStepResult(value);
  switch (parsed.kind) {
    case Parsed::Kind::kDone:
      out.kind = WaitOutcome::Kind::kDone;
      out.content = parsed.result.content;
      break;
    case Parsed::Kind::kStepError:
      out.kind = WaitOutcome::Kind::kStepError;
      out.retryable = parsed.result.retryable;
      out.message = SanitizeErrorText(parsed.result.message, options.sanitize);
      break;
    case Parsed::Kind::kProtocolError:
      out.kind = WaitOutcome::Kind::kProtocolError;
      out.message = parsed.problem;
      spdlog::debug("job {} step {}: {}; the raw value ({} bytes): {}", job_id, step,
                    parsed.problem, value.size(), EscapeBytes(value, 200));
      break;
  }
  if (options.mode == ReadMode::kAtLeastOnce && options.already_committed &&
      options.already_committed(out.delivery_id)) {
    out.duplicate = true;  // committed before; only the removal was missing
    (void)store.Del(key);
  }
}

std::string TimeoutMessage(const std::string& job_id, const std::string& step,
                           const WaitOptions& options, const WaitOutcome& out,
                           const std::string& transient) {
  return "no result for step " + step + " of job " + job_id + " within " +
         SecondsText(options.timeout) + "; last read (" + std::to_string(out.reads) +
         " in all): " + std::string(ReadClassName(out.last_seen)) +
         (transient.empty() ? " (no value stored)" : " (" + transient + ")");
}

}  // namespace

std::string ResultKey(const std::string& job_id, const std::string& step) {
  return "result:{" + job_id + "}:" + step;
}

std::string NudgeChannel(const std::string& job_id, const std::string& step) {
  return "nudge:{" + job_id + "}:" + step;
}

Status PublishResult(ResultStore& store, const std::string& job_id, const std::string& step,
                     const StepResult& result, Duration ttl) {
  DROVER_RETURN_IF_ERROR(store.Set(ResultKey(job_id, step), EncodeStepResult(result), ttl));
  (void)store.Publish(NudgeChannel(job_id, step), ResultKey(job_id, step));
  return Status::Ok();
}

std::string_view WaitOutcomeName(WaitOutcome::Kind kind) {
  switch (kind) {
    case WaitOutcome::Kind::kDone:
      return "done";
    case WaitOutcome::Kind::kStepError:
      return "step_error";
    case WaitOutcome::Kind::kProtocolError:
      return "protocol_error";
    case WaitOutcome::Kind::kTimeout:
      return "timeout";
    case WaitOutcome::Kind::kCancelled:
      return "cancelled";
  }
  return "?";
}

WaitOutcome Wait(ResultStore& store, Clock& clock, const std::string& job_id,
                 const std::string& step, const WaitOptions& options, std::stop_token stop) {
  const std::string key = ResultKey(job_id, step);
  const MonoTime began = clock.Now();
  const MonoTime deadline = began + options.timeout;
  WaitOutcome out;
  auto wake = std::make_shared<Wake>();
  auto subscribe = [&] {
    return store.Subscribe(NudgeChannel(job_id, step), [wake](const std::string&) {
      MutexLock lock(wake->mu);
      wake->pending = true;
      wake->current.request_stop();
    });
  };
  // Subscribed before the first read: a result published after that read still wakes us.
  auto subscription = subscribe();
  std::string transient;  // the store's last complaint, for a timeout's message
  if (!subscription.ok()) transient = subscription.status().message();
  bool nudged = false;

  while (true) {
    if (stop.stop_requested()) {
      out.kind = WaitOutcome::Kind::kCancelled;
      out.message = "cancelled after " + SecondsText(clock.Now() - began);
      break;
    }
    auto read = options.mode == ReadMode::kDestructive ? store.GetDel(key) : store.Get(key);
    ++out.reads;
    out.last_seen = Classify(read);
    if (out.last_seen == ReadClass::kTerminal) {
      out.nudged = nudged;
      TakeTerminal(store, key, job_id, step, options, read, out);
      break;
    }
    if (out.last_seen == ReadClass::kTransient) {
      transient = read.status().message();
    } else {
      transient.clear();
    }
    if (!subscription.ok()) {
      subscription = subscribe();       // the store may be back; the ticker covers until then
      if (subscription.ok()) continue;  // read once more: a nudge may have been missed
    }

    const MonoTime now = clock.Now();
    if (now >= deadline) {
      out.kind = WaitOutcome::Kind::kTimeout;
      out.message = TimeoutMessage(job_id, step, options, out, transient);
      break;
    }
    nudged = SleepUntilNudged(*wake, clock, std::min(now + options.tick, deadline), stop);
  }
  out.waited = clock.Now() - began;
  return out;
}

Status Acknowledge(ResultStore& store, const std::string& job_id, const std::string& step) {
  return store.Del(ResultKey(job_id, step));
}

RetryBudget::RetryBudget(ResultStore& store, std::string job_id, std::string step, int max_retries,
                         Duration wait_ceiling)
    : store_(store),
      job_id_(std::move(job_id)),
      step_(std::move(step)),
      max_retries_(max_retries),
      ttl_(2 * wait_ceiling) {}

std::string RetryBudget::key() const { return "retry:{" + job_id_ + "}:" + step_; }

bool RetryBudget::Allow() {
  if (max_retries_ <= 0) return false;
  const auto n = store_.IncrementWithTtl(key(), ttl_);
  return n.ok() && *n <= max_retries_;
}

}  // namespace drover::jobs
