#include "demo_steps.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "drover/examples/whoami/v1/whoami.grpc.pb.h"
#include "drover/grpc.h"
#include "drover/jobs.h"
#include "router/evaluation.h"
#include "sdk/socket_util.h"

namespace drover::cli::demo {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
namespace pb = drover::examples::whoami::v1;

std::string Port() { return std::to_string(sdk::FreeLoopbackPort()); }

// One WhoAmI call; the instance that answered, or "(error text)".
std::string Who(grpc::Channel& channel, Duration deadline) {
  auto stub = pb::WhoAmI::NewStub(std::shared_ptr<grpc::Channel>(&channel, [](auto*) {}));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  pb::WhoReply reply;
  const grpc::Status s = stub->Who(&ctx, pb::WhoRequest{}, &reply);
  return s.ok() ? reply.instance() : "(" + s.error_message() + ")";
}

std::string Counts(const std::map<std::string, int>& per, const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids) {
    const auto it = per.find(id);
    out += (out.empty() ? "" : "/") + std::to_string(it == per.end() ? 0 : it->second);
  }
  return out;
}

}  // namespace

std::string Fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

bool StepReport::ok() const {
  return std::all_of(figures.begin(), figures.end(), [](const Figure& f) { return f.ok; });
}

// --- ReadyWatch --------------------------------------------------------------------------------

ReadyWatch::ReadyWatch(HttpClient registry, std::vector<std::string> services)
    : registry_(std::move(registry)), services_(std::move(services)) {
  poller_ = std::jthread([this](std::stop_token stop) { Poll(stop); });
}

ReadyWatch::~ReadyWatch() {
  poller_.request_stop();
  poller_.join();
}

void ReadyWatch::Poll(std::stop_token stop) {
  RealClock clock;
  while (!stop.stop_requested()) {
    for (const std::string& service : services_) {
      auto ready = RegistryReadiness(registry_, service);
      if (!ready.ok()) continue;  // the next poll tries again; a demo step waits with a deadline
      const MonoTime now = clock.Now();
      std::lock_guard lock(mu_);
      std::set<std::string>& now_ready = ready_now_[service];
      now_ready.clear();
      for (const auto& [id, is_ready] : *ready) {
        if (!is_ready) continue;
        now_ready.insert(id);
        first_ready_.emplace(id, now);
      }
    }
    clock.SleepFor(milliseconds(100), stop);
  }
}

std::optional<MonoTime> ReadyWatch::ReadySince(const std::string& id) const {
  std::lock_guard lock(mu_);
  const auto it = first_ready_.find(id);
  if (it == first_ready_.end()) return std::nullopt;
  return it->second;
}

std::set<std::string> ReadyWatch::ReadyNow(const std::string& service) const {
  std::lock_guard lock(mu_);
  const auto it = ready_now_.find(service);
  return it == ready_now_.end() ? std::set<std::string>{} : it->second;
}

bool ReadyWatch::WaitReady(const std::vector<std::string>& ids, Duration limit,
                           std::stop_token stop) const {
  RealClock clock;
  const MonoTime until = clock.Now() + limit;
  while (!stop.stop_requested() && clock.Now() < until) {
    if (std::all_of(ids.begin(), ids.end(),
                    [this](const std::string& id) { return ReadySince(id).has_value(); })) {
      return true;
    }
    clock.SleepFor(milliseconds(50), stop);
  }
  return false;
}

// --- Zone deploys ------------------------------------------------------------------------------

rollout::DeployOutcome DeployZone(Context& c, const std::string& version, double crash_after) {
  rollout::DeploySpec spec;
  spec.service = "zone";
  spec.version = version;
  spec.instances = 3;
  // Short enough for a demo, in the same proportions as production: warm-up, then READY, then
  // the gate's minimum healthy time and two checks; leaving takes propagation + drain.
  spec.argv = {c.fleet.options().exe,
               "sample",
               "zone",
               "--registry",
               c.fleet.registry_grpc(),
               "--id",
               "{id}",
               "--listen",
               "127.0.0.1:{port}",
               "--health",
               "127.0.0.1:{health_port}",
               "--version-label",
               "{version}",
               "--warmup-ms",
               "1000",
               "--ttl-ms",
               "3000",
               "--propagation-ms",
               "500",
               "--drain-ms",
               "1500",
               "--grace-ms",
               "5000"};
  if (crash_after > 0) {
    spec.argv.push_back("--crash-after");
    spec.argv.push_back(Fixed(crash_after, 1));
  }
  spec.gate.min_healthy = std::chrono::seconds(3);
  spec.gate.check_delay = std::chrono::seconds(1);
  spec.gate.progress_deadline = std::chrono::seconds(30);
  spec.stop_grace = std::chrono::seconds(8);
  spec.poll = milliseconds(100);
  // The deployer's registry client is its own: the ReadyWatch thread has one too.
  HttpClient registry = c.registry;
  rollout::Deployer deployer(
      c.agent, [&](const std::string& service) { return RegistryReadiness(registry, service); },
      [&](const std::string& id, const json& record) { return c.agent.Record(id, record); },
      c.clock,
      [&](const std::string& service, const std::string& id) {
        return RegistryForget(registry, service, id);
      });
  return deployer.Run(spec, c.stop);
}

// --- Step 2: job results -----------------------------------------------------------------------

StepReport JobResultsStep(Clock& clock, std::stop_token stop) {
  StepReport r{2, "job results: a failing job", {}, json::object()};
  jobs::EmbeddedStore store(clock);
  const jobs::StepResult failure{jobs::StepResult::Status::kError, false,
                                 "texture atlas missing for map 7 (render node gpu-2)", ""};
  constexpr auto kPublishAfter = milliseconds(300);
  constexpr auto kBound = milliseconds(1000);

  // Drover's waiter: nudge + ticker, one classification; "error" is terminal at once.
  MonoTime published{};
  std::jthread producer([&](std::stop_token s) {
    if (!clock.SleepFor(kPublishAfter, s)) return;
    published = clock.Now();
    (void)jobs::PublishResult(store, "job-42", "render", failure);
  });
  jobs::WaitOptions options;
  options.mode = jobs::ReadMode::kDestructive;
  options.tick = std::chrono::seconds(1);
  options.timeout = std::chrono::seconds(10);
  const jobs::WaitOutcome out = jobs::Wait(store, clock, "job-42", "render", options, stop);
  const MonoTime seen = clock.Now();
  producer.join();
  const double seen_ms = Seconds(seen - published) * 1000;
  const bool terminal = out.kind == jobs::WaitOutcome::Kind::kStepError;

  // The incident's waiter, for contrast: GETDEL, and anything but "done" means "not ready".
  // It consumes the failure notice on its first read after the publish and waits on.
  (void)jobs::PublishResult(store, "job-43", "render", failure);
  constexpr auto kIncidentWait = milliseconds(2000);
  const MonoTime until = clock.Now() + kIncidentWait;
  std::string incident_status = "in progress";
  while (clock.Now() < until && !stop.stop_requested()) {
    auto value = store.GetDel(jobs::ResultKey("job-43", "render"));
    if (value.ok() && value->has_value()) {
      const json parsed = json::parse(**value, nullptr, false);
      if (parsed.is_object() && parsed.value("status", "") == "done") {
        incident_status = "done";
        break;
      }
    }
    clock.SleepFor(milliseconds(200), stop);
  }
  auto left = store.Get(jobs::ResultKey("job-43", "render"));
  const bool notice_gone = left.ok() && !left->has_value();

  r.figures.push_back(
      {"failure seen by the waiter after it was published",
       Fixed(seen_ms, 1) + " ms (" + std::string(jobs::WaitOutcomeName(out.kind)) + ")",
       "<= " + std::to_string(kBound.count()) + " ms, terminal",
       terminal && seen_ms <= kBound.count()});
  r.figures.push_back({"the incident's waiter (GETDEL, not-done = not ready)",
                       "says \"" + incident_status + "\" after " +
                           Fixed(Seconds(kIncidentWait), 1) + " s" +
                           (notice_gone ? "; the notice is gone" : ""),
                       "", true});
  r.data = {{"outcome", jobs::WaitOutcomeName(out.kind)},
            {"message", out.message},
            {"failure_seen_ms", seen_ms},
            {"bound_ms", kBound.count()},
            {"terminal", terminal},
            {"incident_waiter_status", incident_status},
            {"incident_waiter_waited_s", Seconds(kIncidentWait)},
            {"incident_notice_consumed", notice_gone}};
  return r;
}

// --- Step 3: shard scale-out -------------------------------------------------------------------

StepReport ShardStep() {
  StepReport r{3, "shard scale-out 4 -> 5", {}, json::object()};
  router::EvaluationOptions options;
  options.endpoints = 4;
  options.keys = 200'000;
  options.timing_picks = 20'000;
  const router::Evaluation ev = router::EvaluateRouting(options);
  constexpr double kMoveBound = 1.1;
  const double ideal = 1.0 / 5;
  auto moved = [&](double ratio) { return Fixed(100 * ratio * ideal, 1) + "% of keys"; };
  r.figures.push_back({"keys moved, Maglev (ideal " + Fixed(100 * ideal, 0) + "%)",
                       moved(ev.maglev.add) + " = " + Fixed(ev.maglev.add, 2) + "x ideal",
                       "<= " + Fixed(kMoveBound, 1) + "x ideal", ev.maglev.add <= kMoveBound});
  r.figures.push_back({"keys moved, ring hash",
                       moved(ev.ring.add) + " = " + Fixed(ev.ring.add, 2) + "x ideal",
                       "<= " + Fixed(kMoveBound, 1) + "x ideal", ev.ring.add <= kMoveBound});
  r.figures.push_back({"keys moved, hash % n (the incident)",
                       moved(ev.modn.add) + " = " + Fixed(ev.modn.add, 2) + "x ideal", "", true});
  const double bound_load = options.bounded_c * 1.05;
  r.figures.push_back({"hot keys (Zipf 1.1): busiest shard / mean, no bound",
                       Fixed(ev.maglev_zipf, 2) + "x", "", true});
  r.figures.push_back({"same, bounded load c=" + Fixed(options.bounded_c, 2),
                       Fixed(ev.bounded_maglev_zipf, 2) + "x", "<= " + Fixed(bound_load, 2) + "x",
                       ev.bounded_maglev_zipf <= bound_load});
  r.data = {{"from", 4},
            {"to", 5},
            {"ideal_fraction", ideal},
            {"maglev_moved_vs_ideal", ev.maglev.add},
            {"ring_moved_vs_ideal", ev.ring.add},
            {"modn_moved_vs_ideal", ev.modn.add},
            {"move_bound", kMoveBound},
            {"hot_peak_to_mean_unbounded", ev.maglev_zipf},
            {"hot_peak_to_mean_bounded", ev.bounded_maglev_zipf},
            {"bounded_c", options.bounded_c}};
  return r;
}

// --- Step 4: gRPC ------------------------------------------------------------------------------

StepReport GrpcStep(Context& c) {
  StepReport r{4, "gRPC balancing, 3 -> 5 servers", {}, json::object()};
  auto start = [&](int n) {
    const std::string id = "whoami-" + std::to_string(n);
    rollout::LaunchSpec spec;
    spec.service = "whoami";
    spec.id = id;
    spec.version = "v1";
    spec.argv = {c.fleet.options().exe,
                 "sample",
                 "whoami",
                 "--registry",
                 c.fleet.registry_grpc(),
                 "--service",
                 "whoami",
                 "--id",
                 id,
                 "--listen",
                 "127.0.0.1:" + Port(),
                 "--health",
                 "127.0.0.1:" + Port(),
                 "--ttl-ms",
                 "3000",
                 "--propagation-ms",
                 "300",
                 "--drain-ms",
                 "2000"};
    if (Status s = c.agent.Start(spec); !s.ok() && s.code() != StatusCode::kAlreadyExists) {
      spdlog::warn("demo: starting {}: {}", id, s.message());
    }
    return id;
  };
  std::vector<std::string> first = {start(1), start(2), start(3)};
  if (!c.ready.WaitReady(first, std::chrono::seconds(20), c.stop)) {
    r.figures.push_back({"3 gRPC servers READY", "not within 20 s", "READY", false});
    return r;
  }

  // The incident: one channel to one address (an L4 balancer) pins one connection.
  auto pinned = grpc::CreateChannel(c.fleet.whoami_address(), grpc::InsecureChannelCredentials());
  // Drover's channel: round robin over every routable instance, from the registry.
  DiscoveryOptions discovery;
  discovery.registry = c.fleet.registry_grpc();
  discovery.service = "whoami";
  auto drover = grpc_defaults::ServiceChannel::Start(discovery, {}, c.clock);
  if (!drover.ok()) {
    r.figures.push_back({"Drover channel", drover.status().message(), "starts", false});
    return r;
  }
  auto balanced = [&]() -> std::shared_ptr<grpc::Channel> {
    auto got = (*drover)->Get();
    return got.ok() ? *got : nullptr;
  };
  const auto addresses = [&] {
    const std::string t = (*drover)->target();
    return t.empty() ? 0 : 1 + static_cast<int>(std::count(t.begin(), t.end(), ','));
  };
  for (int i = 0; i < 100 && addresses() < 3 && !c.stop.stop_requested(); ++i) {
    c.clock.SleepFor(milliseconds(50), c.stop);
  }

  constexpr int kCalls = 60;
  constexpr auto kDeadline = std::chrono::seconds(2);
  std::map<std::string, int> pinned_per, balanced_per;
  for (int i = 0; i < kCalls && !c.stop.stop_requested(); ++i) {
    ++pinned_per[Who(*pinned, kDeadline)];
    if (auto ch = balanced()) ++balanced_per[Who(*ch, kDeadline)];
  }
  int pinned_max = 0;
  for (const auto& [who, n] : pinned_per) pinned_max = std::max(pinned_max, n);
  const bool even = std::all_of(first.begin(), first.end(), [&](const std::string& id) {
    const int n = balanced_per.count(id) ? balanced_per.at(id) : 0;
    return n >= 15 && n <= 25;
  });
  r.figures.push_back({"60 calls through one address (the incident)",
                       std::to_string(pinned_max) + " of 60 on one server", "", true});
  r.figures.push_back({"60 calls through the Drover channel, per server",
                       Counts(balanced_per, first), "each 15..25", even});

  // Scale out 3 -> 5. Nothing breaks the pinned connection, so it never sees the newcomers;
  // the Drover channel is rebuilt when the registry says they are READY.
  std::vector<std::string> added = {start(4), start(5)};
  if (!c.ready.WaitReady(added, std::chrono::seconds(20), c.stop)) {
    r.figures.push_back({"2 more gRPC servers READY", "not within 20 s", "READY", false});
    return r;
  }
  MonoTime ready_at{};
  for (const std::string& id : added) ready_at = std::max(ready_at, *c.ready.ReadySince(id));
  std::map<std::string, double> first_call_s;
  int pinned_calls = 0, pinned_new = 0;
  const MonoTime until = c.clock.Now() + std::chrono::seconds(3);
  while (c.clock.Now() < until && !c.stop.stop_requested()) {
    const std::string p = Who(*pinned, kDeadline);
    ++pinned_calls;
    if (std::find(added.begin(), added.end(), p) != added.end()) ++pinned_new;
    if (auto ch = balanced()) {
      const std::string who = Who(*ch, kDeadline);
      if (std::find(added.begin(), added.end(), who) != added.end() && !first_call_s.count(who)) {
        first_call_s[who] = std::max(0.0, Seconds(c.clock.Now() - *c.ready.ReadySince(who)));
      }
    }
    c.clock.SleepFor(milliseconds(20), c.stop);
  }
  double slowest = 0;
  std::string picked;
  for (const std::string& id : added) {
    const bool got = first_call_s.count(id) > 0;
    slowest = std::max(slowest, got ? first_call_s[id] : 1e9);
    picked += (picked.empty() ? "" : ", ") + (got ? Fixed(first_call_s[id], 2) + " s" : "never");
  }
  constexpr double kPickupBound = 2.0;
  r.figures.push_back({"new servers' first call after READY (Drover channel)", picked,
                       "<= " + Fixed(kPickupBound, 1) + " s", slowest <= kPickupBound});
  r.figures.push_back({"calls reaching new servers through one address (3 s)",
                       std::to_string(pinned_new) + " of " + std::to_string(pinned_calls), "",
                       true});
  json first_calls = json::object();
  for (const auto& [id, s] : first_call_s) first_calls[id] = s;
  r.data = {{"calls", kCalls},
            {"pinned_max_on_one_server", pinned_max},
            {"pinned_per_server", pinned_per},
            {"balanced_per_server", balanced_per},
            {"balanced_even", even},
            {"new_servers_first_call_s", first_calls},
            {"pickup_bound_s", kPickupBound},
            {"pinned_calls_after_scale_out", pinned_calls},
            {"pinned_calls_to_new_servers", pinned_new}};
  return r;
}

}  // namespace drover::cli::demo
