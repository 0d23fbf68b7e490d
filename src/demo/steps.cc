#include "demo/steps.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "demo/evaluation.h"
#include "drover/examples/whoami/v1/whoami.grpc.pb.h"
#include "drover/grpc.h"
#include "drover/jobs.h"
#include "net/http_client.h"
#include "sdk/socket_util.h"

namespace drover::demo {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
namespace pb = drover::examples::whoami::v1;

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

// --- Zone deploys ------------------------------------------------------------------------------

rollout::DeployOutcome DeployZone(Context& c, const std::string& version, double crash_after) {
  rollout::DeploySpec spec;
  spec.service = "zone";
  spec.version = version;
  spec.instances = 3;
  // One batch, one new instance on each host: the demo shows the gate and the hand-over.
  spec.max_surge = {100, true};
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
               "{host}:{port}",
               "--health",
               "{host}:{health_port}",
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
  // The deployer's registry client is its own (a copy): the ReadyWatch thread has one too.
  return rollout::DeployThroughAgents(c.hosts, c.registry, c.clock, spec, c.stop);
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

namespace {

// Starts `<service>-<n>` through an agent (round robin over the hosts): `drover sample <program>`
// registered in `service`, bound to the host's address, with `extra` flags; returns its id.
std::string StartSample(Context& c, const std::string& service, const std::string& program, int n,
                        const std::vector<std::string>& extra) {
  const std::string id = service + "-" + std::to_string(n);
  rollout::LaunchSpec spec;
  spec.service = service;
  spec.id = id;
  spec.version = "v1";
  spec.argv = {c.fleet.options().exe,
               "sample",
               program,
               "--registry",
               c.fleet.registry_grpc(),
               "--service",
               service,
               "--id",
               id,
               "--listen",
               "{host}:{port}",
               "--health",
               "{host}:{health_port}"};
  spec.argv.insert(spec.argv.end(), extra.begin(), extra.end());
  rollout::AgentClient& agent = *c.hosts[static_cast<std::size_t>(n - 1) % c.hosts.size()].client;
  if (Status s = agent.Start(spec); !s.ok() && s.code() != StatusCode::kAlreadyExists) {
    spdlog::warn("demo: starting {}: {}", id, s.message());
  }
  return id;
}

// A shard server: a zone server registered as service "shard".
std::string StartShard(Context& c, int n) {
  return StartSample(c, "shard", "zone", n,
                     {"--warmup-ms", "0", "--ttl-ms", "3000", "--propagation-ms", "300",
                      "--drain-ms", "1000", "--grace-ms", "3000"});
}

constexpr int kShardKeys = 2000;

// One player session through the gateway's key-routed listener: the key line, HELLO, QUIT. The
// server that welcomed it, or "" when none did within 2 s.
std::string KeyedSession(const std::string& address, const std::string& key) {
  const auto colon = address.rfind(':');
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr);
  const timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string seen;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) {
    sdk::SendAll(fd, "DROVER-KEY " + key + "\nHELLO p\nQUIT\n");
    char buf[256];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) seen.append(buf, n);
  }
  ::close(fd);
  const auto at = seen.find("WELCOME ");
  if (at == std::string::npos) return "";
  const auto end = seen.find_first_of("\r\n", at);
  return seen.substr(at + 8, end == std::string::npos ? std::string::npos : end - at - 8);
}

std::vector<std::string> OwnersOf(Context& c, int keys) {
  std::vector<std::string> owners;
  for (int k = 0; k < keys && !c.stop.stop_requested(); ++k) {
    owners.push_back(KeyedSession(c.fleet.shard_address(), "player-" + std::to_string(k)));
  }
  return owners;
}

// The gateway's view of the shard listener (its admin snapshot), or null.
json ShardListener(Context& c) {
  auto admin = net::HttpClient::Create(c.fleet.gateway_admin_url(), "");
  if (!admin.ok()) return nullptr;
  auto got = admin->Send("GET", "/admin/snapshot");
  if (!got.ok() || got->status != 200) return nullptr;
  const json snapshot = json::parse(got->body, nullptr, false);
  if (snapshot.is_discarded()) return nullptr;
  for (const json& l : snapshot.value("listeners", json::array())) {
    if (l.value("name", "") == "shard") return l;
  }
  return nullptr;
}

// Waits (bounded) until the gateway routes the shard over `n` instances with no migration left.
bool SettledOn(Context& c, std::size_t n, std::chrono::seconds within) {
  const MonoTime until = c.clock.Now() + within;
  while (c.clock.Now() < until && !c.stop.stop_requested()) {
    const json l = ShardListener(c);
    if (l.is_object() && l.value("instances", json::array()).size() == n &&
        l.value("migration", json(nullptr)).is_null()) {
      return true;
    }
    c.clock.SleepFor(milliseconds(100), c.stop);
  }
  return false;
}

}  // namespace

StepReport ShardStep(Context& c) {
  StepReport r{3, "shard scale-out 4 -> 5", {}, json::object()};
  std::vector<std::string> first;
  for (int n = 1; n <= 4; ++n) first.push_back(StartShard(c, n));
  if (!c.ready.WaitReady(first, std::chrono::seconds(20), c.stop) ||
      !SettledOn(c, 4, std::chrono::seconds(10))) {
    r.figures.push_back({"4 shard servers READY and routed", "not within 30 s", "READY", false});
    return r;
  }
  // Every key's owner, from real sessions through the gateway.
  const std::vector<std::string> before = OwnersOf(c, kShardKeys);
  // A hot key (seed 002's boss): a third of 1,800 sessions. Once the gateway has found it, its
  // sessions spread over its first 3 owners; the others keep theirs.
  for (int i = 0; i < 1800 && !c.stop.stop_requested(); ++i) {
    KeyedSession(c.fleet.shard_address(), i % 3 == 0 ? "boss" : "player-" + std::to_string(i));
  }
  c.clock.SleepFor(milliseconds(600), c.stop);  // the gateway refreshes its hot set every 250 ms
  std::map<std::string, int> boss;
  for (int i = 0; i < 60 && !c.stop.stop_requested(); ++i) {
    ++boss[KeyedSession(c.fleet.shard_address(), "boss")];
  }
  // Scale out: the fifth server takes its keys in 4 steps, 500 ms apart.
  const std::string fifth = StartShard(c, 5);
  const bool settled = c.ready.WaitReady({fifth}, std::chrono::seconds(20), c.stop) &&
                       SettledOn(c, 5, std::chrono::seconds(15));
  const std::vector<std::string> after = OwnersOf(c, kShardKeys);
  int moved = 0, unanswered = 0;
  for (int k = 0; k < kShardKeys; ++k) {
    if (before[k].empty() || after[k].empty()) {
      ++unanswered;
    } else if (before[k] != after[k]) {
      ++moved;
    }
  }
  const double ideal = 1.0 / 5;
  const double ratio = static_cast<double>(moved) / kShardKeys / ideal;
  constexpr double kMoveBound = 1.1;
  r.figures.push_back(
      {"keys moved by the fifth server, from " + std::to_string(kShardKeys) +
           " players' sessions through the gateway (ideal " + Fixed(100 * ideal, 0) + "%)",
       Fixed(100.0 * moved / kShardKeys, 1) + "% = " + Fixed(ratio, 2) + "x ideal, in 4 steps",
       "<= " + Fixed(kMoveBound, 1) + "x ideal",
       settled && unanswered == 0 && ratio <= kMoveBound});
  // hash % n for comparison: the incident's router on the same scale-out (computed).
  EvaluationOptions options;
  options.endpoints = 4;
  options.keys = 200'000;
  options.timing_picks = 20'000;
  const Evaluation ev = EvaluateRouting(options);
  r.figures.push_back(
      {"keys moved, hash % n (the incident; computed)",
       Fixed(100 * ev.modn.add * ideal, 1) + "% = " + Fixed(ev.modn.add, 2) + "x ideal", "", true});
  const int boss_servers = static_cast<int>(boss.size() - (boss.count("") ? 1 : 0));
  r.figures.push_back({"hot key 'boss': its 60 sessions per server (shard-1..4)",
                       Counts(boss, first), ">= 2 (cold keys: 1)", boss_servers >= 2});
  const double bound_load = options.bounded_c * 1.05;
  r.figures.push_back(
      {"Zipf 1.1 keys, bounded load c=" + Fixed(options.bounded_c, 2) +
           ": busiest shard / mean (computed)",
       Fixed(ev.bounded_maglev_zipf, 2) + "x (" + Fixed(ev.maglev_zipf, 2) + "x without the bound)",
       "<= " + Fixed(bound_load, 2) + "x", ev.bounded_maglev_zipf <= bound_load});
  r.data = {{"from", 4},
            {"to", 5},
            {"keys", kShardKeys},
            {"keys_moved", moved},
            {"unanswered_sessions", unanswered},
            {"ideal_fraction", ideal},
            {"maglev_moved_vs_ideal", ratio},
            {"move_bound", kMoveBound},
            {"migration_steps", 4},
            {"modn_moved_vs_ideal", ev.modn.add},
            {"hot_key_servers", boss_servers},
            {"hot_key_sessions", boss},
            {"hot_peak_to_mean_unbounded", ev.maglev_zipf},
            {"hot_peak_to_mean_bounded", ev.bounded_maglev_zipf},
            {"bounded_c", options.bounded_c}};
  return r;
}

// --- Step 4: gRPC ------------------------------------------------------------------------------

namespace {

constexpr int kCalls = 60;
constexpr auto kCallDeadline = std::chrono::seconds(2);

std::string StartWhoami(Context& c, int n) {
  return StartSample(c, "whoami", "whoami", n,
                     {"--ttl-ms", "3000", "--propagation-ms", "300", "--drain-ms", "2000"});
}

// The two ways a client reaches the WhoAmI servers.
struct Channels {
  // The incident: one channel to one address (an L4 balancer) pins one connection.
  std::shared_ptr<grpc::Channel> pinned;
  // Drover's channel: round robin over every routable instance, from the registry.
  std::unique_ptr<grpc_defaults::ServiceChannel> drover;

  std::shared_ptr<grpc::Channel> balanced() const {
    auto got = drover->Get();
    return got.ok() ? *got : nullptr;
  }
  int addresses() const {
    const std::string t = drover->target();
    return t.empty() ? 0 : 1 + static_cast<int>(std::count(t.begin(), t.end(), ','));
  }
};

// 60 calls through each channel with three servers: how they spread.
void MeasureSpread(Context& c, const Channels& ch, const std::vector<std::string>& servers,
                   StepReport& r) {
  std::map<std::string, int> pinned_per, balanced_per;
  for (int i = 0; i < kCalls && !c.stop.stop_requested(); ++i) {
    ++pinned_per[Who(*ch.pinned, kCallDeadline)];
    if (auto balanced = ch.balanced()) ++balanced_per[Who(*balanced, kCallDeadline)];
  }
  int pinned_max = 0;
  for (const auto& [who, n] : pinned_per) pinned_max = std::max(pinned_max, n);
  const bool even = std::all_of(servers.begin(), servers.end(), [&](const std::string& id) {
    const int n = balanced_per.count(id) ? balanced_per.at(id) : 0;
    return n >= 15 && n <= 25;
  });
  r.figures.push_back({"60 calls through one address (the incident)",
                       std::to_string(pinned_max) + " of 60 on one server", "", true});
  r.figures.push_back({"60 calls through the Drover channel, per server",
                       Counts(balanced_per, servers), "each 15..25", even});
  r.data.update({{"calls", kCalls},
                 {"pinned_max_on_one_server", pinned_max},
                 {"pinned_per_server", pinned_per},
                 {"balanced_per_server", balanced_per},
                 {"balanced_even", even}});
}

// Calls for 3 s after two more servers are READY: when each newcomer gets its first call through
// the Drover channel, and how many calls through the pinned one reach a newcomer at all.
void MeasureScaleOut(Context& c, const Channels& ch, const std::vector<std::string>& added,
                     StepReport& r) {
  std::map<std::string, double> first_call_s;
  int pinned_calls = 0, pinned_new = 0;
  const auto is_new = [&](const std::string& who) {
    return std::find(added.begin(), added.end(), who) != added.end();
  };
  const MonoTime until = c.clock.Now() + std::chrono::seconds(3);
  while (c.clock.Now() < until && !c.stop.stop_requested()) {
    ++pinned_calls;
    if (is_new(Who(*ch.pinned, kCallDeadline))) ++pinned_new;
    if (auto balanced = ch.balanced()) {
      const std::string who = Who(*balanced, kCallDeadline);
      if (is_new(who) && !first_call_s.count(who)) {
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
  for (const auto& [id, seconds] : first_call_s) first_calls[id] = seconds;
  r.data.update({{"new_servers_first_call_s", first_calls},
                 {"pickup_bound_s", kPickupBound},
                 {"pinned_calls_after_scale_out", pinned_calls},
                 {"pinned_calls_to_new_servers", pinned_new}});
}

}  // namespace

StepReport GrpcStep(Context& c) {
  StepReport r{4, "gRPC balancing, 3 -> 5 servers", {}, json::object()};
  const std::vector<std::string> first = {StartWhoami(c, 1), StartWhoami(c, 2), StartWhoami(c, 3)};
  if (!c.ready.WaitReady(first, std::chrono::seconds(20), c.stop)) {
    r.figures.push_back({"3 gRPC servers READY", "not within 20 s", "READY", false});
    return r;
  }
  Channels ch;
  ch.pinned = grpc::CreateChannel(c.fleet.whoami_address(), grpc::InsecureChannelCredentials());
  DiscoveryOptions discovery;
  discovery.registry = c.fleet.registry_grpc();
  discovery.service = "whoami";
  auto drover = grpc_defaults::ServiceChannel::Start(discovery, {}, c.clock);
  if (!drover.ok()) {
    r.figures.push_back({"Drover channel", drover.status().message(), "starts", false});
    return r;
  }
  ch.drover = std::move(*drover);
  for (int i = 0; i < 100 && ch.addresses() < 3 && !c.stop.stop_requested(); ++i) {
    c.clock.SleepFor(milliseconds(50), c.stop);
  }
  MeasureSpread(c, ch, first, r);

  // Scale out 3 -> 5. Nothing breaks the pinned connection, so it never sees the newcomers;
  // the Drover channel is rebuilt when the registry says they are READY.
  const std::vector<std::string> added = {StartWhoami(c, 4), StartWhoami(c, 5)};
  if (!c.ready.WaitReady(added, std::chrono::seconds(20), c.stop)) {
    r.figures.push_back({"2 more gRPC servers READY", "not within 20 s", "READY", false});
    return r;
  }
  MeasureScaleOut(c, ch, added, r);
  return r;
}

}  // namespace drover::demo
