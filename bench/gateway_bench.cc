// Gateway benchmark (TCP): Drover's gateway against HAProxy (mode tcp) and nginx (stream module),
// all in front of the same zone-server processes on loopback, each configured alike: the same
// upstreams, least-connections-style balancing, the same number of worker threads.
//
//   sessions/s   closed loop: --clients concurrent players, each repeating one short session
//                (connect, HELLO -> WELCOME, QUIT -> BYE, close) for --seconds
//   p50 / p99    the time of one whole session as the player sees it
//   direct       the same load straight at one upstream, no proxy: what one upstream does alone
//
// The zone server runs a thread per session, so on a small machine the upstreams, not the
// proxies, bound the rate; the ratios then say how much each proxy costs on top of them.
//
// Every proxy row ends with Drover's ratio to it (sessions/s: Drover / peer, above 1 is better;
// p99: Drover / peer, below 1 is better). A peer whose binary is missing is skipped, said so.
// Nothing leaves 127.0.0.1.
#include <fmt/format.h>

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "testing/child_process.h"
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
  int clients = 64;
  int upstreams = 2;
  int threads = 2;
  double seconds = 3;
  bool json = false;
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

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Drover's TCP gateway against HAProxy and nginx in front of the same zone servers"};
  app.add_option("--clients", o.clients, "Concurrent players (closed loop)")->capture_default_str();
  app.add_option("--seconds", o.seconds, "Measured time per system")->capture_default_str();
  app.add_option("--upstreams", o.upstreams, "Zone server processes behind every proxy")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "Worker threads of every proxy")->capture_default_str();
  app.add_option("--haproxy", o.haproxy, "haproxy binary")->capture_default_str();
  app.add_option("--nginx", o.nginx, "nginx binary")->capture_default_str();
  app.add_flag("--json", o.json, "Print the report as JSON");
  CLI11_PARSE(app, argc, argv);

  std::atexit(StopPeers);
  drover::testing::TempDir dir;
  const std::string d = dir.path();
  using drover::testing::ChildProcess;
  std::vector<std::unique_ptr<ChildProcess>> children;

  // The registry and the upstreams (zone servers registered through ServerHost).
  auto& registry = children.emplace_back(std::make_unique<ChildProcess>(
      std::vector<std::string>{o.drover, "registry", "--data-dir", d + "/registry", "--http",
                               "127.0.0.1:0", "--grpc", "127.0.0.1:0"}));
  const auto reg_line = registry->ReadLine(20s);
  if (!reg_line) Fail("the registry did not start");
  const std::uint16_t grpc_port = PortIn(*reg_line, R"(grpc://127\.0\.0\.1:(\d+))");
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
    auto& gw = children.emplace_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{o.drover, "--log-level", "warn", "gateway", "--config", config}));
    const auto line = gw->ReadLine(20s);
    if (!line) Fail("drover gateway did not start");
    const std::uint16_t port = PortIn(*line, R"(zone=127\.0\.0\.1:(\d+))");
    if (!Answers(port)) Fail("drover gateway does not route");
    Run("drover", port, o, 0.3);
    results.push_back(Run("drover", port, o, o.seconds));
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
    cfg << "load_module " << module << ";\nworker_processes " << o.threads << ";\ndaemon off;\npid "
        << d << "/nginx/nginx.pid;\nerror_log stderr warn;\n"
        << "events { worker_connections 20000; }\nstream {\n  upstream zones {\n    least_conn;\n";
    for (std::uint16_t p : upstream_ports) cfg << "    server 127.0.0.1:" << p << ";\n";
    cfg << "  }\n  server {\n    listen 127.0.0.1:" << port
        << ";\n    proxy_pass zones;\n    proxy_connect_timeout 1s;\n  }\n}\n";
    cfg.close();
    graceful.push_back(children
                           .emplace_back(std::make_unique<ChildProcess>(
                               std::vector<std::string>{*nginx, "-p", d + "/nginx", "-c", config}))
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
  const Result& drover = results[1];
  nlohmann::json report;
  if (!o.json) {
    std::printf("gateway_bench: %d clients, %d upstreams, %d threads per proxy, %.1f s each\n",
                o.clients, o.upstreams, o.threads, o.seconds);
    std::printf("%-22s %12s %9s %9s %8s %16s %13s\n", "system", "sessions/s", "p50 ms", "p99 ms",
                "errors", "drover/x rate", "drover/x p99");
  }
  for (const Result& r : results) {
    nlohmann::json j = {{"sessions_per_s", r.sessions_per_s},
                        {"p50_ms", r.p50_ms},
                        {"p99_ms", r.p99_ms},
                        {"sessions", r.sessions},
                        {"errors", r.errors},
                        {"skipped", r.skipped}};
    const bool peer =
        (r.system == "haproxy" || r.system == "nginx") && !r.skipped && r.sessions_per_s > 0;
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
  if (o.json) std::printf("%s\n", report.dump(2).c_str());
  return 0;
}
