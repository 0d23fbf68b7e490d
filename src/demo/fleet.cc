#include "demo/fleet.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/child_process.h"
#include "net/http_client.h"
#include "sdk/socket_util.h"

namespace drover::demo {
namespace {

std::string Url(std::uint16_t port, const std::string& host = "127.0.0.1") {
  return "http://" + host + ":" + std::to_string(port);
}

// A port nobody listens on at `host` right now (0 if none).
std::uint16_t FreePortOn(const std::string& host) {
  auto listening = sdk::ListenTcp(host + ":0", 1, "a free port");
  if (!listening.ok()) return 0;
  ::close(listening->fd);
  return listening->port;
}

// Polls GET /live at `url` until it answers 200, the child ends, or `limit` passes.
Status WaitLive(Child& child, const std::string& url, Duration limit) {
  auto client = net::HttpClient::Create(url, "", std::chrono::seconds(2), {}, child.name());
  if (!client.ok()) return client.status();
  const MonoTime until = MonoClock::now() + limit;
  Status last = UnavailableError("no answer yet");
  while (MonoClock::now() < until) {
    if (std::string ended = child.Ended(); !ended.empty()) {
      return UnavailableError("the " + child.name() + " " + ended + " at start; see " +
                              child.log());
    }
    auto reply = client->Send("GET", "/live");
    if (reply.ok() && reply->status == 200) return Status::Ok();
    last = reply.ok() ? UnavailableError("/live answered " + std::to_string(reply->status))
                      : reply.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return UnavailableError("the " + child.name() + " did not come up: " + last.message() + "; see " +
                          child.log());
}

std::string GatewayConfig(const std::string& registry_grpc, std::uint16_t admin, std::uint16_t zone,
                          std::uint16_t whoami, std::uint16_t shard, Duration slow_start) {
  const auto ms = [](Duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  // Zone: P2C with slow start and active /ready checks, as a production gateway would run.
  // Whoami: a plain L4 address in front of the gRPC servers -- what seed 003's clients had.
  return "# Written by `drover demo`.\n"
         "registry: " +
         registry_grpc + "\nthreads: 2\nadmin: 127.0.0.1:" + std::to_string(admin) +
         "\ndrain_ms: 2000\nlisteners:\n"
         "  - name: zone\n    protocol: tcp\n    address: 127.0.0.1:" +
         std::to_string(zone) +
         "\n    service: zone\n    policy: p2c\n    slow_start_ms: " + ms(slow_start) +
         "\n    health_check_interval_ms: 500\n    health_check_timeout_ms: 300\n"
         "  - name: whoami\n    protocol: tcp\n    address: 127.0.0.1:" +
         std::to_string(whoami) +
         "\n    service: whoami\n    policy: p2c\n"
         // Shard: key-routed (seed 002), a hot key spread over 3 owners, keys moving in steps.
         // Bounded load off: the demo's players come one at a time, and at a load of one the
         // bound (any c <= 5) would send a player elsewhere whenever the gateway had not yet
         // counted the previous one out -- moves that are not the scale-out's.
         "  - name: shard\n    protocol: tcp\n    address: 127.0.0.1:" +
         std::to_string(shard) +
         "\n    service: shard\n    policy: hash\n    bounded_load: 1000000\n"
         "    hot_key_fraction: 0.05\n"
         "    hot_key_owners: 3\n    migration_steps: 4\n    migration_step_ms: 500\n";
}

}  // namespace

Result<Child> Child::Spawn(std::string name, const std::vector<std::string>& argv,
                           const std::string& log) {
  SpawnOptions options;
  options.argv = argv;
  options.output = log;
  options.what = name;
  DROVER_ASSIGN_OR_RETURN(const pid_t pid, drover::Spawn(options));
  return Child(std::move(name), log, pid);
}

Child::Child(Child&& other) noexcept
    : name_(std::move(other.name_)),
      log_(std::move(other.log_)),
      pid_(std::exchange(other.pid_, -1)),
      ended_(std::move(other.ended_)) {}

Child::~Child() {
  if (pid_ > 0 && Ended().empty()) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

std::string Child::Ended() {
  if (pid_ <= 0 || !ended_.empty()) return ended_;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) ended_ = DescribeWaitStatus(status);
  if (r < 0) ended_ = "gone";
  return ended_;
}

std::string Child::Stop(Duration grace) {
  if (!Ended().empty()) return ended_;
  ::kill(pid_, SIGTERM);
  const MonoTime until = MonoClock::now() + grace;
  while (MonoClock::now() < until) {
    if (!Ended().empty()) return ended_;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  ended_ = DescribeWaitStatus(status) + " (after " +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(grace).count()) +
           " s of SIGTERM)";
  return ended_;
}

const std::vector<std::string>& Fleet::HostAddresses() {
  static const std::vector<std::string> kHosts = {"127.0.0.2", "127.0.0.3", "127.0.0.4"};
  return kHosts;
}

Result<std::unique_ptr<Fleet>> Fleet::Start(const FleetOptions& options) {
  std::unique_ptr<Fleet> fleet(new Fleet(options));
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> dirs = {"registry", "logs"};
  for (const std::string& host : HostAddresses()) dirs.push_back("agent-" + host);
  for (const std::string& sub : dirs) {
    fs::create_directories(fs::path(options.data_dir) / sub, ec);
    if (ec) {
      return UnavailableError("cannot create " + options.data_dir + "/" + sub + ": " +
                              ec.message());
    }
  }
  Fleet& f = *fleet;
  f.registry_http_ = options.ui_port != 0 ? options.ui_port : sdk::FreeLoopbackPort();
  f.registry_grpc_ = sdk::FreeLoopbackPort();
  f.gateway_admin_ = sdk::FreeLoopbackPort();
  f.zone_ = sdk::FreeLoopbackPort();
  f.whoami_ = sdk::FreeLoopbackPort();
  f.shard_ = sdk::FreeLoopbackPort();
  for (const std::string& host : HostAddresses()) {
    f.agents_.push_back(FreePortOn(host));
    if (f.agents_.back() == 0) {
      return UnavailableError("cannot bind " + host +
                              " (the demo's agents stand for hosts on 127.0.0.2-4)");
    }
  }
  for (std::uint16_t p :
       {f.registry_http_, f.registry_grpc_, f.gateway_admin_, f.zone_, f.whoami_, f.shard_}) {
    if (p == 0) return UnavailableError("no free loopback port");
  }
  const std::string logs = options.data_dir + "/logs/";
  const std::string gateway_yaml = options.data_dir + "/gateway.yaml";
  {
    std::ofstream out(gateway_yaml);
    out << GatewayConfig(f.registry_grpc(), f.gateway_admin_, f.zone_, f.whoami_, f.shard_,
                         options.slow_start);
    if (!out) return UnavailableError("cannot write " + gateway_yaml);
  }

  struct Spec {
    std::string name;
    std::vector<std::string> argv;
    std::string live_url;
  };
  std::vector<Spec> specs = {
      {"registry",
       {options.exe, "registry", "--data-dir", options.data_dir + "/registry", "--http",
        "127.0.0.1:" + std::to_string(f.registry_http_), "--grpc", f.registry_grpc(),
        "--ui-gateway", f.gateway_admin_url()},
       Url(f.registry_http_)}};
  for (const std::string& url : f.agent_urls())
    specs[0].argv.insert(specs[0].argv.end(), {"--ui-agent", url});
  for (std::size_t i = 0; i < HostAddresses().size(); ++i) {
    const std::string& host = HostAddresses()[i];
    specs.push_back(
        {"agent " + host,
         {options.exe, "agent", "--data-dir", options.data_dir + "/agent-" + host, "--listen",
          host + ":" + std::to_string(f.agents_[i]), "--registry", f.registry_grpc()},
         Url(f.agents_[i], host)});
  }
  specs.push_back(
      {"gateway", {options.exe, "gateway", "--config", gateway_yaml}, Url(f.gateway_admin_)});
  for (const Spec& spec : specs) {
    std::string log = spec.name;
    std::replace(log.begin(), log.end(), ' ', '-');
    auto child = Child::Spawn(spec.name, spec.argv, logs + log + ".log");
    if (!child.ok()) return child.status();
    f.children_.push_back(std::move(child).value());
    if (Status s = WaitLive(f.children_.back(), spec.live_url, std::chrono::seconds(15)); !s.ok()) {
      return s;  // the destructor stops what started
    }
    spdlog::debug("demo: {} up", spec.name);
  }
  return fleet;
}

Fleet::~Fleet() { Stop(); }

std::vector<std::string> Fleet::Stop() {
  std::vector<std::string> lines;
  // Reverse start order: nothing routes to instances that are going, the registry sees them go.
  while (!children_.empty()) {
    Child& c = children_.back();
    // The agent stops every instance in order, each within its own grace.
    const Duration grace =
        c.name().starts_with("agent") ? std::chrono::seconds(20) : std::chrono::seconds(5);
    lines.push_back(c.name() + " " + c.Stop(grace));
    children_.pop_back();
  }
  return lines;
}

Status Fleet::Check() {
  for (Child& c : children_) {
    if (std::string ended = c.Ended(); !ended.empty()) {
      return UnavailableError("the " + c.name() + " " + ended + "; see " + c.log());
    }
  }
  return Status::Ok();
}

std::string Fleet::registry_url() const { return Url(registry_http_); }
std::string Fleet::registry_grpc() const { return "127.0.0.1:" + std::to_string(registry_grpc_); }
std::vector<std::string> Fleet::agent_urls() const {
  std::vector<std::string> urls;
  for (std::size_t i = 0; i < agents_.size(); ++i)
    urls.push_back(Url(agents_[i], HostAddresses()[i]));
  return urls;
}
std::string Fleet::gateway_admin_url() const { return Url(gateway_admin_); }
std::string Fleet::zone_address() const { return "127.0.0.1:" + std::to_string(zone_); }
std::string Fleet::whoami_address() const { return "127.0.0.1:" + std::to_string(whoami_); }
std::string Fleet::shard_address() const { return "127.0.0.1:" + std::to_string(shard_); }

}  // namespace drover::demo
