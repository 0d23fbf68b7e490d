// Gateway benchmark: Drover's gateway against HAProxy and nginx, each configured alike (the same
// upstreams, least-connections-style balancing, keep-alive to the upstream, the same number of
// worker threads), all on loopback. Two parts:
//
// TCP -- Drover (tcp listener), HAProxy (mode tcp), nginx (stream module) in front of the same
// zone-server processes:
//   sessions/s   closed loop: --clients concurrent players, each repeating one short session
//                (connect, HELLO -> WELCOME, QUIT -> BYE, close) for --seconds
//   p50 / p99    the time of one whole session as the player sees it
//   direct       the same load straight at one upstream, no proxy: what one upstream does alone
// The zone server runs a thread per session, so on a small machine the upstreams, not the
// proxies, bound the rate; the ratios then say how much each proxy costs on top of them.
//
// HTTP -- Drover (http listener), HAProxy (mode http), nginx (proxy_pass, upstream keepalive) in
// front of one small fast HTTP upstream (an nginx answering `return 200` from one worker), loaded
// by wrk: --http-connections keep-alive connections, GET of a 2-byte body, --http-seconds;
// requests/s and p99 as wrk reports them (wrk --latency).
//
// Idle -- --idle-sessions TCP sessions held open through each proxy (Drover's tcp listener,
// HAProxy mode tcp, nginx stream) to a sink in this process that accepts and holds them, nothing
// sent: the proxy's RSS growth (with nginx's workers) per session.
//
// Every proxy row ends with Drover's ratio to it (rate: Drover / peer, above 1 is better; p99:
// Drover / peer, below 1 is better). A peer whose binary is missing is skipped, said so.
// Nothing leaves 127.0.0.1.
#include <fmt/format.h>

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/child_process.h"
#include "testing/http_client.h"
#include "testing/temp_dir.h"

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Options {
  std::string drover = DROVER_BINARY;
  std::string zone_server = ZONE_SERVER_BINARY;
  std::string haproxy = "haproxy";
  std::string nginx = "nginx";
  std::string wrk = "wrk";
  int clients = 64;
  int http_connections = 64;
  double http_seconds = 5;
  bool tcp = true;
  bool http = true;
  int upstreams = 2;
  int threads = 2;
  double seconds = 3;
  bool json = false;
  int idle_sessions = 4000;
};

// Multi-process peers (nginx's master and workers) must be stopped politely: a SIGKILLed
// master leaves its workers behind, holding the port and our stdout. Stopped at exit, also when
// Fail() exits early.
std::vector<drover::testing::ChildProcess*> graceful;

void StopPeers() {
  for (drover::testing::ChildProcess* p : graceful) {
    if (p->running()) {
      p->Signal(SIGTERM);
      p->Wait();
    }
  }
  graceful.clear();
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "gateway_bench: %s\n", what.c_str());
  std::exit(1);
}

std::optional<std::string> FindInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return std::filesystem::exists(name) ? std::optional(name) : std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  dirs += ":/usr/sbin:/sbin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = dirs.find(':', start);
    const std::string dir =
        dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && std::filesystem::exists(dir + "/" + name)) return dir + "/" + name;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return std::nullopt;
}

std::uint16_t FreePort() {
  net::io_context io;
  tcp::acceptor a(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

std::uint16_t PortIn(const std::string& line, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(pattern))) return 0;
  return static_cast<std::uint16_t>(std::stoi(m[1].str()));
}

struct Result {
  std::string system;
  double sessions_per_s = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  std::uint64_t sessions = 0;
  std::uint64_t errors = 0;
  bool skipped = false;
  std::string note;
};

// One session; false on any failure.
net::awaitable<bool> OneSession(const tcp::endpoint& to) {
  tcp::socket s(co_await net::this_coro::executor);
  error_code ec;
  co_await s.async_connect(to, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  s.set_option(tcp::no_delay(true), ec);
  net::streambuf buf;
  static const std::string hello = "HELLO bench\n", quit = "QUIT\n";
  co_await net::async_write(s, net::buffer(hello), net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  co_await net::async_read_until(s, buf, '\n', net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  std::string line{net::buffers_begin(buf.data()), net::buffers_end(buf.data())};
  if (!line.starts_with("WELCOME ")) co_return false;
  buf.consume(buf.size());
  co_await net::async_write(s, net::buffer(quit), net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  co_await net::async_read_until(s, buf, '\n', net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  line.assign(net::buffers_begin(buf.data()), net::buffers_end(buf.data()));
  co_return line.starts_with("BYE");
}

// Closed loop: `clients` players repeat sessions until `until`; latencies in ns.
Result Run(const std::string& system, std::uint16_t port, const Options& o, double seconds) {
  net::io_context io(1);
  const tcp::endpoint to(net::ip::make_address("127.0.0.1"), port);
  std::vector<std::int64_t> latencies;
  std::uint64_t errors = 0;
  const auto start = Clock::now();
  const auto until =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int c = 0; c < o.clients; ++c) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          while (Clock::now() < until) {
            const auto t0 = Clock::now();
            const bool ok = co_await OneSession(to);
            if (ok) {
              latencies.push_back((Clock::now() - t0).count());
            } else {
              ++errors;
            }
          }
        },
        net::detached);
  }
  io.run();
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  Result r;
  r.system = system;
  r.sessions = latencies.size();
  r.errors = errors;
  r.sessions_per_s = static_cast<double>(latencies.size()) / took;
  if (!latencies.empty()) {
    std::sort(latencies.begin(), latencies.end());
    auto pct = [&](double p) {
      return static_cast<double>(latencies[static_cast<std::size_t>(
                 p * static_cast<double>(latencies.size() - 1))]) /
             1e6;
    };
    r.p50_ms = pct(0.50);
    r.p99_ms = pct(0.99);
  }
  return r;
}

bool Answers(std::uint16_t port) {
  for (int i = 0; i < 200; ++i) {
    net::io_context io;
    bool ok = false;
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          ok = co_await OneSession(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
        },
        net::detached);
    io.run();
    if (ok) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

std::string NginxStreamModule() {
  for (const char* p : {"/usr/lib/nginx/modules/ngx_stream_module.so",
                        "/usr/share/nginx/modules/ngx_stream_module.so"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return {};
}

// wrk's report of one run (wrk takes whole seconds): requests/s, p99, errors (socket errors and
// non-2xx answers).
Result RunWrk(const std::string& wrk, const std::string& system, std::uint16_t port,
              const Options& o, double seconds) {
  Result r;
  r.system = system;
  drover::testing::ChildProcess child(
      {wrk, "-t", "2", "-c", std::to_string(o.http_connections), "-d",
       std::to_string(std::max(1L, std::lround(seconds))) + "s", "--latency",
       "http://127.0.0.1:" + std::to_string(port) + "/"});
  std::string out;
  while (auto line = child.ReadLine(std::chrono::seconds(std::lround(seconds) + 30))) {
    out += *line + "\n";
  }
  child.Wait();
  std::smatch m;
  if (std::regex_search(out, m, std::regex(R"(Requests/sec:\s+([\d.]+))"))) {
    r.sessions_per_s = std::stod(m[1].str());
  } else {
    r.skipped = true;
    r.note = "wrk printed no rate: " + out;
    return r;
  }
  const auto ms = [&](const std::string& pct) {
    std::smatch v;
    if (!std::regex_search(out, v, std::regex("\\s" + pct + R"(%\s+([\d.]+)(us|ms|s))")))
      return 0.0;
    const double x = std::stod(v[1].str());
    return v[2] == "us" ? x / 1000 : v[2] == "s" ? x * 1000 : x;
  };
  r.p50_ms = ms("50");
  r.p99_ms = ms("99");
  if (std::regex_search(out, m, std::regex(R"((\d+) requests in)"))) {
    r.sessions = std::stoull(m[1].str());
  }
  if (std::regex_search(out, m, std::regex(R"(Non-2xx or 3xx responses: (\d+))"))) {
    r.errors += std::stoull(m[1].str());
  }
  if (std::regex_search(
          out, m,
          std::regex(R"(Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+))"))) {
    for (int i = 1; i <= 4; ++i) r.errors += std::stoull(m[i].str());
  }
  return r;
}

bool HttpAnswers(std::uint16_t port) {
  for (int i = 0; i < 200; ++i) {
    if (drover::testing::Http(port, "GET", "/").status == 200) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// Prints (or adds to `report`) one table; results[1] is Drover's.
void Report(const char* title, const char* unit, const std::vector<Result>& results,
            const Options& o, nlohmann::json& report) {
  const Result& drover = results[1];
  if (!o.json) {
    std::printf("%s\n", title);
    std::printf("%-22s %12s %9s %9s %8s %16s %13s\n", "system", unit, "p50 ms", "p99 ms", "errors",
                "drover/x rate", "drover/x p99");
  }
  for (const Result& r : results) {
    nlohmann::json j = {{"rate_per_s", r.sessions_per_s},
                        {"p50_ms", r.p50_ms},
                        {"p99_ms", r.p99_ms},
                        {"count", r.sessions},
                        {"errors", r.errors},
                        {"skipped", r.skipped}};
    const bool peer = (r.system == "haproxy" || r.system == "nginx") && !r.skipped &&
                      r.sessions_per_s > 0 && !drover.skipped;
    if (peer) {
      j["drover_rate_ratio"] = drover.sessions_per_s / r.sessions_per_s;
      j["drover_p99_ratio"] = r.p99_ms > 0 ? drover.p99_ms / r.p99_ms : 0;
    }
    report[r.system] = j;
    if (o.json) continue;
    if (r.skipped) {
      std::printf("%-22s skipped: %s\n", r.system.c_str(), r.note.c_str());
      continue;
    }
    std::printf("%-22s %12.0f %9.2f %9.2f %8llu", r.system.c_str(), r.sessions_per_s, r.p50_ms,
                r.p99_ms, static_cast<unsigned long long>(r.errors));
    if (peer) {
      std::printf(" %15.2fx %12.2fx", drover.sessions_per_s / r.sessions_per_s,
                  r.p99_ms > 0 ? drover.p99_ms / r.p99_ms : 0.0);
    }
    std::printf("\n");
  }
}

// Idle memory: --idle-sessions TCP sessions held open through a proxy to a sink that accepts and
// holds them, nothing sent either way. The proxy's resident memory (its process and, for nginx,
// its workers) grows by the sessions' cost: RSS delta / count.
class Sink {
 public:
  Sink() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 4096) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      Fail("the idle sink cannot listen");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
          if (stop_) return;
          continue;
        }
        std::lock_guard lock(mu_);
        held_.push_back(c);
      }
    });
  }
  ~Sink() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
    DropAll();
  }
  std::uint16_t port() const { return port_; }
  std::size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  void DropAll() {
    std::lock_guard lock(mu_);
    for (const int c : held_) ::close(c);
    held_.clear();
  }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<int> held_;
  std::thread thread_;
};

// A blocking TCP connection to 127.0.0.1:`port`; -1 when it fails (errno says why).
int ConnectLoopback(std::uint16_t port) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(port);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

// Resident KiB of `pid` and its direct children (nginx's workers).
std::uint64_t TreeRssKb(pid_t pid) {
  const auto rss = [](const std::string& proc) -> std::uint64_t {
    std::ifstream status(proc + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
    }
    return 0;
  };
  std::uint64_t total = rss("/proc/" + std::to_string(pid));
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const std::size_t paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid) total += rss(entry.path().string());
  }
  return total;
}

// Opens `count` sessions through the proxy at `port` to `sink`, waits until the sink holds them
// all, and returns the proxy's RSS growth per session in bytes (or a note why it could not).
struct IdleCost {
  double bytes_per_session = 0;
  std::string note;
};
IdleCost MeasureIdle(pid_t proxy, std::uint16_t port, Sink& sink, int count) {
  sink.DropAll();
  std::this_thread::sleep_for(300ms);
  const std::uint64_t before = TreeRssKb(proxy);
  std::vector<int> clients;
  clients.reserve(count);
  IdleCost cost;
  for (int i = 0; i < count; ++i) {
    const int fd = ConnectLoopback(port);
    if (fd < 0) {
      cost.note = "connect " + std::to_string(i) + " failed: " + std::strerror(errno);
      break;
    }
    clients.push_back(fd);
  }
  const auto deadline = Clock::now() + 30s;
  while (cost.note.empty() && sink.held() < clients.size() && Clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  if (cost.note.empty() && sink.held() < clients.size()) {
    cost.note = "only " + std::to_string(sink.held()) + " of " + std::to_string(clients.size()) +
                " sessions reached the sink";
  }
  std::this_thread::sleep_for(500ms);
  const std::uint64_t after = TreeRssKb(proxy);
  if (cost.note.empty()) {
    cost.bytes_per_session =
        after > before ? 1024.0 * static_cast<double>(after - before) / count : 0.0;
  }
  for (const int fd : clients) ::close(fd);
  sink.DropAll();
  return cost;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Drover's gateway against HAProxy and nginx: TCP sessions and HTTP requests"};
  app.add_option("--clients", o.clients, "Concurrent players (closed loop)")->capture_default_str();
  app.add_option("--seconds", o.seconds, "Measured time per system")->capture_default_str();
  app.add_option("--upstreams", o.upstreams, "Zone server processes behind every proxy")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "Worker threads of every proxy")->capture_default_str();
  app.add_option("--haproxy", o.haproxy, "haproxy binary")->capture_default_str();
  app.add_option("--nginx", o.nginx, "nginx binary")->capture_default_str();
  app.add_option("--http-connections", o.http_connections, "wrk keep-alive connections")
      ->capture_default_str();
  app.add_option("--http-seconds", o.http_seconds, "Measured wrk time per system")
      ->capture_default_str();
  app.add_option("--wrk", o.wrk, "wrk binary")->capture_default_str();
  app.add_flag("!--no-tcp", o.tcp, "Skip the TCP part");
  app.add_flag("!--no-http", o.http, "Skip the HTTP part");
  app.add_flag("--json", o.json, "Print the report as JSON");
  app.add_option("--idle-sessions", o.idle_sessions,
                 "Idle TCP sessions held through every proxy for the memory figure (0: skip)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::atexit(StopPeers);
  drover::testing::TempDir dir;
  const std::string d = dir.path();
  using drover::testing::ChildProcess;
  std::vector<std::unique_ptr<ChildProcess>> children;

  // The registry.
  auto& registry = children.emplace_back(std::make_unique<ChildProcess>(
      std::vector<std::string>{o.drover, "registry", "--data-dir", d + "/registry", "--http",
                               "127.0.0.1:0", "--grpc", "127.0.0.1:0"}));
  const auto reg_line = registry->ReadLine(20s);
  if (!reg_line) Fail("the registry did not start");
  const std::uint16_t grpc_port = PortIn(*reg_line, R"(grpc://127\.0\.0\.1:(\d+))");
  const std::uint16_t registry_http = PortIn(*reg_line, R"(http://127\.0\.0\.1:(\d+))");
  nlohmann::json report;
  // TCP: the upstreams are zone servers registered through ServerHost.
  if (o.tcp) {
    std::vector<std::uint16_t> upstream_ports;
    for (int i = 0; i < o.upstreams; ++i) {
      auto& z = children.emplace_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          o.zone_server, "--registry", "127.0.0.1:" + std::to_string(grpc_port), "--id",
          "u" + std::to_string(i), "--warmup-ms", "0", "--health", "127.0.0.1:0", "--log-level",
          "warn"}));
      z->ReadLine(20s);
      const auto serving = z->ReadLine(20s);
      if (!serving) Fail("a zone server did not start");
      upstream_ports.push_back(PortIn(*serving, R"(serving at 127\.0\.0\.1:(\d+))"));
    }

    std::vector<Result> results;
    results.push_back(Run("direct", upstream_ports[0], o, 0.3));  // warm-up, discarded
    results.back() = Run("direct (one upstream)", upstream_ports[0], o, o.seconds);

    // Drover.
    {
      const std::string config = d + "/gateway.yaml";
      std::ofstream(config) << "registry: 127.0.0.1:" << grpc_port << "\nthreads: " << o.threads
                            << "\nadmin: ''\nlisteners:\n  - name: zone\n    address: 127.0.0.1:0\n"
                            << "    service: zone\n    policy: p2c\n    slow_start_ms: 0\n";
      auto& gw = children.emplace_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          o.drover, "--log-level", "warn", "gateway", "--config", config}));
      const auto line = gw->ReadLine(20s);
      if (!line) Fail("drover gateway did not start");
      const std::uint16_t port = PortIn(*line, R"(zone=127\.0\.0\.1:(\d+))");
      if (!Answers(port)) Fail("drover gateway does not route");
      Run("drover", port, o, 0.3);
      results.push_back(Run("drover", port, o, o.seconds));
      gw->Signal(SIGTERM);
      gw->Wait();
    }
    // HAProxy.
    if (auto haproxy = FindInPath(o.haproxy)) {
      const std::uint16_t port = FreePort();
      const std::string config = d + "/haproxy.cfg";
      std::ofstream cfg(config);
      cfg << "global\n  maxconn 8000\n  nbthread " << o.threads
          << "\ndefaults\n  mode tcp\n  timeout connect 1s\n  timeout client 60s\n"
          << "  timeout server 60s\nfrontend zone\n  bind 127.0.0.1:" << port
          << "\n  default_backend zones\nbackend zones\n  balance leastconn\n";
      for (std::size_t i = 0; i < upstream_ports.size(); ++i) {
        cfg << "  server u" << i << " 127.0.0.1:" << upstream_ports[i] << "\n";
      }
      cfg.close();
      graceful.push_back(children
                             .emplace_back(std::make_unique<ChildProcess>(
                                 std::vector<std::string>{*haproxy, "-db", "-f", config}))
                             .get());
      if (!Answers(port)) Fail("haproxy does not route");
      Run("haproxy", port, o, 0.3);
      results.push_back(Run("haproxy", port, o, o.seconds));
    } else {
      results.push_back(Result{.system = "haproxy", .skipped = true, .note = "not installed"});
    }
    // nginx (stream module).
    const std::string module = NginxStreamModule();
    if (auto nginx = FindInPath(o.nginx); nginx && !module.empty()) {
      const std::uint16_t port = FreePort();
      std::filesystem::create_directories(d + "/nginx/logs");
      const std::string config = d + "/nginx/nginx.conf";
      std::ofstream cfg(config);
      cfg << "load_module " << module << ";\nworker_processes " << o.threads
          << ";\ndaemon off;\npid " << d << "/nginx/nginx.pid;\nerror_log stderr warn;\n"
          << "events { worker_connections 20000; }\nstream {\n  upstream zones {\n    "
             "least_conn;\n";
      for (std::uint16_t p : upstream_ports) cfg << "    server 127.0.0.1:" << p << ";\n";
      cfg << "  }\n  server {\n    listen 127.0.0.1:" << port
          << ";\n    proxy_pass zones;\n    proxy_connect_timeout 1s;\n  }\n}\n";
      cfg.close();
      graceful.push_back(children
                             .emplace_back(std::make_unique<ChildProcess>(std::vector<std::string>{
                                 *nginx, "-p", d + "/nginx", "-c", config}))
                             .get());
      if (!Answers(port)) Fail("nginx does not route");
      Run("nginx", port, o, 0.3);
      results.push_back(Run("nginx", port, o, o.seconds));
    } else {
      results.push_back(
          Result{.system = "nginx",
                 .skipped = true,
                 .note = module.empty() ? "stream module not installed" : "not installed"});
    }

    StopPeers();
    Report(fmt::format(
               "gateway_bench tcp: {} clients, {} upstreams, {} threads per proxy, {:.1f} s each",
               o.clients, o.upstreams, o.threads, o.seconds)
               .c_str(),
           "sessions/s", results, o, report["tcp"]);
  }

  // Idle memory: sessions held open through each proxy to a sink in this process.
  if (o.idle_sessions > 0) {
    Sink sink;
    const auto put =
        drover::testing::Http(registry_http, "PUT", "/v1/services/sink/instances/s0",
                              R"({"address":"127.0.0.1:)" + std::to_string(sink.port()) +
                                  R"(","generation":1,"state":"READY","ttl_ms":3600000})");
    if (put.status != 200) Fail("registering the idle sink failed: " + put.body);
    // Until a connection through `port` reaches the sink.
    const auto reaches_sink = [&](std::uint16_t port) {
      for (int i = 0; i < 100; ++i) {
        const int fd = ConnectLoopback(port);
        const bool connected = fd >= 0;
        std::this_thread::sleep_for(100ms);
        if (connected) ::close(fd);
        const bool reached = connected && sink.held() > 0;
        sink.DropAll();
        if (reached) return true;
      }
      return false;
    };
    struct Row {
      std::string system;
      IdleCost cost;
    };
    std::vector<Row> rows;
    {
      const std::string config = d + "/gateway-idle.yaml";
      std::ofstream(config) << "registry: 127.0.0.1:" << grpc_port << "\nthreads: " << o.threads
                            << "\nadmin: ''\nlisteners:\n  - name: idle\n    address: 127.0.0.1:0\n"
                            << "    service: sink\n    policy: p2c\n    slow_start_ms: 0\n";
      auto& gw = children.emplace_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          o.drover, "--log-level", "warn", "gateway", "--config", config}));
      const auto line = gw->ReadLine(20s);
      if (!line) Fail("drover gateway (idle) did not start");
      const std::uint16_t port = PortIn(*line, R"(idle=127\.0\.0\.1:(\d+))");
      if (!reaches_sink(port)) Fail("drover gateway does not reach the idle sink");
      rows.push_back({"drover", MeasureIdle(gw->pid(), port, sink, o.idle_sessions)});
      gw->Signal(SIGTERM);
      gw->Wait();
    }
    if (auto haproxy = FindInPath(o.haproxy)) {
      const std::uint16_t port = FreePort();
      const std::string config = d + "/haproxy-idle.cfg";
      std::ofstream(config) << "global\n  maxconn 8000\n  nbthread " << o.threads
                            << "\ndefaults\n  mode tcp\n  timeout connect 1s\n"
                            << "  timeout client 60s\n  timeout server 60s\nfrontend idle\n"
                            << "  bind 127.0.0.1:" << port << "\n  default_backend sinks\n"
                            << "backend sinks\n  server s0 127.0.0.1:" << sink.port() << "\n";
      auto& peer = children.emplace_back(
          std::make_unique<ChildProcess>(std::vector<std::string>{*haproxy, "-db", "-f", config}));
      graceful.push_back(peer.get());
      if (!reaches_sink(port)) Fail("haproxy does not reach the idle sink");
      rows.push_back({"haproxy", MeasureIdle(peer->pid(), port, sink, o.idle_sessions)});
      peer->Signal(SIGTERM);
      peer->Wait();
    }
    const std::string module = NginxStreamModule();
    if (auto nginx = FindInPath(o.nginx); nginx && !module.empty()) {
      const std::uint16_t port = FreePort();
      std::filesystem::create_directories(d + "/nginx-idle/logs");
      const std::string config = d + "/nginx-idle/nginx.conf";
      std::ofstream(config) << "load_module " << module << ";\nworker_processes " << o.threads
                            << ";\nworker_rlimit_nofile 20000;\ndaemon off;\npid " << d
                            << "/nginx-idle/nginx.pid;\nerror_log stderr warn;\n"
                            << "events { worker_connections 20000; }\nstream {\n  server {\n"
                            << "    listen 127.0.0.1:" << port
                            << ";\n    proxy_pass 127.0.0.1:" << sink.port() << ";\n  }\n}\n";
      auto& peer = children.emplace_back(std::make_unique<ChildProcess>(
          std::vector<std::string>{*nginx, "-p", d + "/nginx-idle", "-c", config}));
      graceful.push_back(peer.get());
      if (!reaches_sink(port)) Fail("nginx does not reach the idle sink");
      rows.push_back({"nginx", MeasureIdle(peer->pid(), port, sink, o.idle_sessions)});
    }
    StopPeers();
    const double drover_bytes = rows.front().cost.bytes_per_session;
    if (!o.json) {
      std::printf(
          "gateway_bench idle: %d idle TCP sessions held through each proxy, %d threads "
          "per proxy\n%-22s %16s %16s\n",
          o.idle_sessions, o.threads, "system", "RSS B/session", "drover/x");
    }
    for (const Row& r : rows) {
      nlohmann::json j = {{"bytes_per_session", r.cost.bytes_per_session}};
      if (!r.cost.note.empty()) j["note"] = r.cost.note;
      const bool peer = r.system != "drover" && r.cost.note.empty() && r.cost.bytes_per_session > 0;
      if (peer) j["drover_ratio"] = drover_bytes / r.cost.bytes_per_session;
      report["idle"][r.system] = j;
      if (o.json) continue;
      if (!r.cost.note.empty()) {
        std::printf("%-22s failed: %s\n", r.system.c_str(), r.cost.note.c_str());
        continue;
      }
      std::printf("%-22s %16.0f", r.system.c_str(), r.cost.bytes_per_session);
      if (peer) std::printf(" %15.2fx", drover_bytes / r.cost.bytes_per_session);
      std::printf("\n");
    }
  }

  // HTTP: one small fast upstream (nginx, one worker, `return 200`), registered by hand.
  const auto nginx = FindInPath(o.nginx);
  const auto wrk = FindInPath(o.wrk);
  if (o.http && (!nginx || !wrk)) {
    report["http"]["skipped"] = std::string(!wrk ? "wrk" : "nginx") + " not installed";
    if (!o.json)
      std::printf("gateway_bench http: skipped, %s not installed\n", !wrk ? "wrk" : "nginx");
  } else if (o.http) {
    const std::uint16_t upstream_port = FreePort();
    std::filesystem::create_directories(d + "/upstream/logs");
    {
      std::ofstream cfg(d + "/upstream/nginx.conf");
      cfg << "worker_processes 1;\ndaemon off;\npid " << d << "/upstream/nginx.pid;\n"
          << "error_log stderr warn;\nevents { worker_connections 4096; }\nhttp {\n"
          << "  access_log off;\n  keepalive_requests 1000000;\n  server {\n    listen 127.0.0.1:"
          << upstream_port << ";\n    location / { return 200 \"ok\"; }\n  }\n}\n";
    }
    graceful.push_back(children
                           .emplace_back(std::make_unique<ChildProcess>(std::vector<std::string>{
                               *nginx, "-p", d + "/upstream", "-c", d + "/upstream/nginx.conf"}))
                           .get());
    if (!HttpAnswers(upstream_port)) Fail("the nginx upstream does not answer");
    const auto put =
        drover::testing::Http(registry_http, "PUT", "/v1/services/web/instances/h0",
                              R"({"address":"127.0.0.1:)" + std::to_string(upstream_port) +
                                  R"(","generation":1,"state":"READY","ttl_ms":3600000})");
    if (put.status != 200) Fail("registering the HTTP upstream failed: " + put.body);

    std::vector<Result> results;
    RunWrk(*wrk, "direct", upstream_port, o, 0.5);  // warm-up, discarded
    results.push_back(RunWrk(*wrk, "direct (no proxy)", upstream_port, o, o.http_seconds));
    // Drover.
    {
      const std::string config = d + "/gateway-http.yaml";
      std::ofstream(config) << "registry: 127.0.0.1:" << grpc_port << "\nthreads: " << o.threads
                            << "\nadmin: ''\nlisteners:\n  - name: web\n    protocol: http\n"
                            << "    address: 127.0.0.1:0\n    slow_start_ms: 0\n"
                            << "    health_check_interval_ms: 0\n    routes:\n"
                            << "      - prefix: /\n        service: web\n";
      auto& gw = children.emplace_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          o.drover, "--log-level", "warn", "gateway", "--config", config}));
      const auto line = gw->ReadLine(20s);
      if (!line) Fail("drover gateway (http) did not start");
      const std::uint16_t port = PortIn(*line, R"(web=127\.0\.0\.1:(\d+))");
      if (!HttpAnswers(port)) Fail("drover gateway does not route HTTP");
      RunWrk(*wrk, "drover", port, o, 0.5);
      results.push_back(RunWrk(*wrk, "drover", port, o, o.http_seconds));
      gw->Signal(SIGTERM);
      gw->Wait();
    }
    // HAProxy (mode http; it keeps server-side connections alive by default).
    if (auto haproxy = FindInPath(o.haproxy)) {
      const std::uint16_t port = FreePort();
      const std::string config = d + "/haproxy-http.cfg";
      std::ofstream(config) << "global\n  maxconn 8000\n  nbthread " << o.threads
                            << "\ndefaults\n  mode http\n  timeout connect 1s\n"
                            << "  timeout client 60s\n  timeout server 60s\nfrontend web\n"
                            << "  bind 127.0.0.1:" << port
                            << "\n  default_backend webs\nbackend webs\n  balance leastconn\n"
                            << "  server h0 127.0.0.1:" << upstream_port << "\n";
      auto& peer = children.emplace_back(
          std::make_unique<ChildProcess>(std::vector<std::string>{*haproxy, "-db", "-f", config}));
      graceful.push_back(peer.get());
      if (!HttpAnswers(port)) Fail("haproxy does not route HTTP");
      RunWrk(*wrk, "haproxy", port, o, 0.5);
      results.push_back(RunWrk(*wrk, "haproxy", port, o, o.http_seconds));
      peer->Signal(SIGTERM);
      peer->Wait();
    } else {
      results.push_back(Result{.system = "haproxy", .skipped = true, .note = "not installed"});
    }
    // nginx (proxy_pass with upstream keepalive).
    {
      const std::uint16_t port = FreePort();
      std::filesystem::create_directories(d + "/nginx-http/logs");
      const std::string config = d + "/nginx-http/nginx.conf";
      std::ofstream(config) << "worker_processes " << o.threads << ";\ndaemon off;\npid " << d
                            << "/nginx-http/nginx.pid;\nerror_log stderr warn;\n"
                            << "events { worker_connections 20000; }\nhttp {\n  access_log off;\n"
                            << "  upstream webs {\n    least_conn;\n    server 127.0.0.1:"
                            << upstream_port << ";\n    keepalive 256;\n  }\n  server {\n"
                            << "    listen 127.0.0.1:" << port << ";\n    location / {\n"
                            << "      proxy_pass http://webs;\n      proxy_http_version 1.1;\n"
                            << "      proxy_set_header Connection \"\";\n    }\n  }\n}\n";
      auto& peer = children.emplace_back(std::make_unique<ChildProcess>(
          std::vector<std::string>{*nginx, "-p", d + "/nginx-http", "-c", config}));
      graceful.push_back(peer.get());
      if (!HttpAnswers(port)) Fail("nginx does not route HTTP");
      RunWrk(*wrk, "nginx", port, o, 0.5);
      results.push_back(RunWrk(*wrk, "nginx", port, o, o.http_seconds));
    }
    StopPeers();
    Report(fmt::format("gateway_bench http: wrk -t2 -c{} keep-alive GET (2-byte body), {} threads "
                       "per proxy, {:.1f} s each",
                       o.http_connections, o.threads, o.http_seconds)
               .c_str(),
           "requests/s", results, o, report["http"]);
  }
  if (o.json) std::printf("%s\n", report.dump(2).c_str());
  return 0;
}
