// The Dispatcher (include/drover/jobs.h): claims a job step, picks a node, submits, waits,
// retries elsewhere within the budget, and moves the job's state only by compare-and-set.
#include <optional>
#include <set>

#include "drover/jobs.h"
#include "drover/mutex.h"
#include "drover/router.h"

namespace drover::jobs {
namespace {

// How a Run ends: the end, its reason and the state the job moves to ("": left as it is).
struct Ending {
  DispatchResult::End how;
  std::string reason;
  std::string final_state;
};

}  // namespace

struct Dispatcher::Impl {
  Impl(ResultStore& s, NodeSource n, Submit sub, Clock& c, DispatchOptions o)
      : store(s), nodes(std::move(n)), submit(std::move(sub)), clock(c), options(std::move(o)) {}

  ResultStore& store;
  NodeSource nodes;
  Submit submit;
  Clock& clock;
  const DispatchOptions options;

  Mutex mu;
  std::map<std::string, std::unique_ptr<CircuitBreaker>> breakers DROVER_GUARDED_BY(mu);
  std::map<std::string, std::uint64_t> in_flight DROVER_GUARDED_BY(mu);
  router::Xoshiro256 random DROVER_GUARDED_BY(mu) = router::Xoshiro256(0x6a6f6273);

  CircuitBreaker& BreakerFor(const std::string& id) DROVER_REQUIRES(mu) {
    auto& b = breakers[id];
    if (!b) b = std::make_unique<CircuitBreaker>(options.breaker, clock);
    return *b;
  }

  struct Pick {
    router::Endpoint node;
    CircuitBreaker::Permit permit;
  };

  // A routable node not in `tried` whose breaker lets this call through, by P2C over the
  // in-flight counts; or why there is none.
  Result<Pick> Choose(const std::set<std::string>& tried) {
    DROVER_ASSIGN_OR_RETURN(std::shared_ptr<const router::RoutingTable> table, nodes());
    MutexLock lock(mu);
    std::vector<router::Endpoint> candidates;
    for (const router::Endpoint& e : table->endpoints()) {
      if (!e.Routable() || tried.count(e.id) > 0) continue;
      if (BreakerFor(e.id).state() == CircuitBreaker::State::kOpen) continue;
      candidates.push_back(e);
    }
    while (!candidates.empty()) {
      auto filtered = router::RoutingTable::Create(table->version(), candidates);
      if (!filtered.ok()) return filtered.status();
      const router::P2cPicker p2c =
          router::P2cPicker::Build(**filtered, router::SlowStartOptions{Duration::zero()});
      std::vector<std::uint64_t> loads;
      for (const router::Endpoint& e : (*filtered)->endpoints()) loads.push_back(in_flight[e.id]);
      DROVER_ASSIGN_OR_RETURN(std::size_t index, p2c.Pick(loads, clock.Now(), random));
      const router::Endpoint& node = (*filtered)->at(index);
      if (auto permit = BreakerFor(node.id).TryAcquire()) {
        ++in_flight[node.id];
        return Pick{node, *permit};
      }
      // Half-open with its probe slots taken: not this one, this time.
      const std::string id = node.id;
      std::erase_if(candidates, [&](const router::Endpoint& e) { return e.id == id; });
    }
    return UnavailableError(tried.empty() ? "no compute node can take the job"
                                          : "no other compute node to retry on");
  }

  void Done(const Pick& pick, CallOutcome outcome) {
    MutexLock lock(mu);
    --in_flight[pick.node.id];
    BreakerFor(pick.node.id).Report(pick.permit, outcome);
  }

  // Takes attempt 1 of a job step (its state from absent to `state`); or, when the step is not
  // this Run's to take, how the Run ends.
  std::optional<Ending> Claim(const std::string& key, const std::string& state,
                              const std::string& job_id, const std::string& step) {
    auto claimed = store.CompareAndSet(key, "", state, options.state_ttl);
    if (!claimed.ok()) {
      return Ending{DispatchResult::End::kFailed,
                    "cannot claim job " + job_id + ": " + claimed.status().message(), ""};
    }
    if (*claimed) return std::nullopt;
    const auto now = store.Get(key);
    const std::string held = now.ok() && now->has_value() ? **now : "?";
    const bool ended = held == "done" || held == "failed" || held == "cancelled";
    return Ending{DispatchResult::End::kClaimedElsewhere,
                  "job " + job_id + " step " + step +
                      (ended ? " already ended (" + held + ")"
                             : " is owned by another consumer (" + held + ")"),
                  ""};
  }

  // Submits the step to the picked node and waits for its result (into `last`): how the Run
  // ends, or nullopt with `why` this attempt did not end the job.
  std::optional<Ending> Attempt(const Pick& pick, const std::string& job_id,
                                const std::string& step, const std::string& payload,
                                std::stop_token stop, WaitOutcome& last, std::string& why) {
    if (Status s = submit(pick.node, job_id, step, payload); !s.ok()) {
      Done(pick, CallOutcome::kTransportError);
      why = "node " + pick.node.id + " did not take it: " + SanitizeErrorText(s.message());
      return std::nullopt;
    }
    last = Wait(store, clock, job_id, step, options.wait, stop);
    const WaitOutcome& out = last;
    switch (out.kind) {
      case WaitOutcome::Kind::kDone:
        Done(pick, CallOutcome::kSuccess);
        return Ending{DispatchResult::End::kDone, "done on " + pick.node.id, "done"};
      case WaitOutcome::Kind::kCancelled:
        Done(pick, CallOutcome::kCancelled);
        return Ending{DispatchResult::End::kCancelled, "cancelled", "cancelled"};
      case WaitOutcome::Kind::kStepError:
        Done(pick, CallOutcome::kStepError);  // the node did its work
        if (!out.retryable) return Ending{DispatchResult::End::kFailed, out.message, "failed"};
        why = out.message;
        break;
      case WaitOutcome::Kind::kProtocolError:
        Done(pick, CallOutcome::kProtocolError);
        why = "node " + pick.node.id + " broke the result contract: " + out.message;
        break;
      case WaitOutcome::Kind::kTimeout:
        Done(pick, CallOutcome::kTransportError);
        why = "node " + pick.node.id + " did not answer: " + out.message;
        break;
    }
    return std::nullopt;
  }
};

std::string_view DispatchEndName(DispatchResult::End end) {
  switch (end) {
    case DispatchResult::End::kDone:
      return "done";
    case DispatchResult::End::kFailed:
      return "failed";
    case DispatchResult::End::kNoNode:
      return "no_node";
    case DispatchResult::End::kClaimedElsewhere:
      return "claimed_elsewhere";
    case DispatchResult::End::kCancelled:
      return "cancelled";
  }
  return "?";
}

Dispatcher::Dispatcher(ResultStore& store, NodeSource nodes, Submit submit, Clock& clock,
                       DispatchOptions options)
    : impl_(std::make_unique<Impl>(store, std::move(nodes), std::move(submit), clock,
                                   std::move(options))) {}

Dispatcher::~Dispatcher() = default;

std::string Dispatcher::StateKey(const std::string& job_id, const std::string& step) {
  return "job:{" + job_id + "}:" + step;
}

CircuitBreaker::State Dispatcher::BreakerState(const std::string& node_id) {
  MutexLock lock(impl_->mu);
  return impl_->BreakerFor(node_id).state();
}

DispatchResult Dispatcher::Run(const std::string& job_id, const std::string& step,
                               const std::string& payload, std::stop_token stop) {
  Impl& d = *impl_;
  DispatchResult result;
  const std::string key = StateKey(job_id, step);
  int attempt = 1;
  std::string state = "attempt:1";
  auto end = [&](DispatchResult::End how, std::string reason, const std::string& final_state) {
    result.end = how;
    result.reason = std::move(reason);
    if (!final_state.empty()) {
      // Only the owner of the current attempt may end it; losing this race means someone
      // else ended or moved it first.
      auto moved = d.store.CompareAndSet(key, state, final_state, d.options.state_ttl);
      if (moved.ok() && !*moved) {
        result.end = DispatchResult::End::kClaimedElsewhere;
        result.reason = "another consumer moved job " + job_id + " on first";
      }
    }
    return result;
  };

  if (std::optional<Ending> refused = d.Claim(key, state, job_id, step)) {
    return end(refused->how, std::move(refused->reason), refused->final_state);
  }
  RetryBudget budget(d.store, job_id, step, d.options.max_retries, d.options.wait.timeout);
  std::set<std::string> tried;

  while (true) {
    if (stop.stop_requested())
      return end(DispatchResult::End::kCancelled, "cancelled", "cancelled");
    auto pick = d.Choose(tried);
    if (!pick.ok()) return end(DispatchResult::End::kNoNode, pick.status().message(), "failed");
    tried.insert(pick->node.id);
    result.nodes.push_back(pick->node.id);

    std::string why;  // why this attempt did not end the job
    if (std::optional<Ending> ending =
            d.Attempt(*pick, job_id, step, payload, stop, result.last, why)) {
      return end(ending->how, std::move(ending->reason), ending->final_state);
    }
    if (!budget.Allow()) {
      return end(DispatchResult::End::kFailed,
                 "gave up after " + std::to_string(attempt) + " attempt(s): " + why, "failed");
    }
    const std::string next = "attempt:" + std::to_string(attempt + 1);
    auto moved = d.store.CompareAndSet(key, state, next, d.options.state_ttl);
    if (!moved.ok()) {
      return end(DispatchResult::End::kFailed,
                 "cannot requeue job " + job_id + ": " + moved.status().message(), "");
    }
    if (!*moved) {
      return end(DispatchResult::End::kClaimedElsewhere,
                 "another consumer moved job " + job_id + " on first", "");
    }
    state = next;
    ++attempt;
  }
}

}  // namespace drover::jobs
