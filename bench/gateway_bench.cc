// Gateway benchmark: Drover's gateway against HAProxy and nginx, each configured alike (the same
// upstreams, least-connections-style balancing, keep-alive to the upstream, the same number of
// worker threads), all on loopback, at each of --threads (default 1 and 2 threads per proxy).
// Every figure is the median of --rounds rounds; within a round the systems take turns (each
// round led by the next one), so a slow spell of the machine hits them alike. Drover runs with
// its defaults (health checks, outlier ejection, retry budget, admin port and metrics on).
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
// front of one fast HTTP upstream (nginx, `return 200` and a static file), loaded by wrk with
// --http-connections connections for --http-seconds:
//   keep-alive   GET of a 3-byte body on keep-alive connections: requests/s, p50, p99
//   close        the same with `Connection: close`: a new client connection per request
//   1 MiB        GET of a 1 MiB file on keep-alive connections: MB/s (wrk's transfer rate)
//
// Idle memory -- the proxy's RSS growth (with nginx's workers) per connection, as RSS delta /
// count, shown per 10,000:
//   TCP sessions   --idle-sessions sessions held open through the TCP listener to a sink in this
//                  process that accepts and holds them, nothing sent
//   HTTP clients   --idle-http-clients keep-alive clients, each after one request and response
// A proxied TCP session holds two descriptors in the proxy, and HAProxy reserves two per
// connection it admits (maxconn 9,500 here), so the counts stay below half the descriptor limit
// (20,000 on the machines this runs on); the tables scale the cost to 10,000.
//
// Every proxy row ends with Drover's ratio to it (rate: Drover / peer, above 1 is better; p99 and
// memory: Drover / peer, below 1 is better), and a verdict line judges each goal on its own
// against the peers it is set against: rates against HAProxy and nginx, p99 and idle memory
// against HAProxy (nginx's ratio stays in the table). A peer whose binary is missing is skipped,
// said so. Nothing leaves 127.0.0.1.
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
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/procfs.h"
#include "drover/cli.h"
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
  double http_seconds = 3;
  bool tcp = true;
  bool http = true;
  int upstreams = 2;
  std::vector<int> threads = {1, 2};
  int rounds = 3;
  double seconds = 3;
  bool json = false;
  bool show_rounds = false;
  int idle_sessions = 8000;
  int idle_http_clients = 8000;
};

// Multi-process peers (nginx's master and workers) must be stopped politely: a SIGKILLed
// master leaves its workers behind, holding the port and our stdout. Stopped at exit, also when
// Fail() exits early.
std::vector<drover::testing::ChildProcess*> graceful;

// The HTTP upstream (nginx too), serving every pass.
drover::testing::ChildProcess* upstream_peer = nullptr;

void StopPeers() {
  if (upstream_peer) graceful.push_back(upstream_peer);
  upstream_peer = nullptr;
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

// `pid` and its direct children (nginx's workers): the processes a proxy's figures add up.
std::vector<int> ProcessTree(pid_t pid) {
  std::vector<int> tree = {pid};
  for (const int p : drover::procfs::Pids()) {
    const auto stat = drover::procfs::StatOf(p);
    if (stat && stat->ppid == pid) tree.push_back(p);
  }
  return tree;
}

// What the scheduler did with a proxy's threads (all of them, with its direct children's), read
// from /proc before and after a measured run: CPU time, time spent runnable but waiting for a
// CPU, and how often a thread was switched out while it could still run (preempted). Per thread,
// so that one that ends or starts during the run (gRPC's are made on demand) is counted for what
// it did in it, never subtracted.
struct SchedCounters {
  std::uint64_t cpu_ns = 0;
  std::uint64_t wait_ns = 0;
  std::uint64_t preempted = 0;

  // Every thread's counters now, by its /proc path.
  using Threads = std::map<std::pair<int, int>, SchedCounters>;  // by (pid, tid)
  static Threads Of(pid_t pid) {
    Threads threads;
    for (const int proc : ProcessTree(pid)) {
      for (const int tid : drover::procfs::Tasks(proc)) {
        SchedCounters c;
        std::istringstream schedstat(drover::procfs::Read(proc, "schedstat", tid));
        if (!(schedstat >> c.cpu_ns >> c.wait_ns)) continue;  // ended meanwhile
        c.preempted =
            drover::procfs::StatusField(proc, "nonvoluntary_ctxt_switches", tid).value_or(0);
        threads[{proc, tid}] = c;
      }
    }
    return threads;
  }
  // What the threads in `after` did since `before`.
  static SchedCounters Since(const Threads& before, const Threads& after) {
    SchedCounters sum;
    for (const auto& [thread, now] : after) {
      const auto then = before.find(thread);
      const SchedCounters was = then == before.end() ? SchedCounters{} : then->second;
      sum.cpu_ns += now.cpu_ns - std::min(now.cpu_ns, was.cpu_ns);
      sum.wait_ns += now.wait_ns - std::min(now.wait_ns, was.wait_ns);
      sum.preempted += now.preempted - std::min(now.preempted, was.preempted);
    }
    return sum;
  }
};

// CPU time every CPU of the machine has spent busy (all but idle and I/O wait) since boot, from
// /proc/stat: over a run, what the proxy cost together with the clients and upstreams it served.
double MachineBusySeconds() {
  std::ifstream stat("/proc/stat");
  std::string cpu;  // the "cpu" line: user nice system idle iowait irq softirq steal
  std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                steal = 0;
  stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
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
  SchedCounters sched;              // the proxy's, over the run
  double machine_us_per_op = 0;     // the machine's busy CPU time over the run, per op
  nlohmann::json rounds = nullptr;  // a median's rounds, each with its scheduler counters

  // The proxy's CPU time per request (or session) in the run, in microseconds.
  double CpuUsPerOp() const {
    return static_cast<double>(sched.cpu_ns) / 1000 /
           std::max<double>(1, static_cast<double>(sessions));
  }
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

// How wrk loads a proxy.
struct WrkLoad {
  std::string path = "/";
  bool close = false;     // `Connection: close`: a new connection per request
  bool transfer = false;  // the figure is MB/s (wrk's Transfer/sec), not requests/s
};

// wrk's report of one run (wrk takes whole seconds): requests/s (or MB/s), p50, p99, errors
// (socket errors and non-2xx answers).
Result RunWrk(const std::string& wrk, const std::string& system, std::uint16_t port,
              const Options& o, double seconds, const WrkLoad& load) {
  Result r;
  r.system = system;
  std::vector<std::string> args = {wrk,
                                   "-t",
                                   "2",
                                   "-c",
                                   std::to_string(o.http_connections),
                                   "-d",
                                   std::to_string(std::max(1L, std::lround(seconds))) + "s",
                                   "--latency"};
  if (load.close) args.insert(args.end(), {"-H", "Connection: close"});
  args.push_back("http://127.0.0.1:" + std::to_string(port) + load.path);
  drover::testing::ChildProcess child(args);
  std::string out;
  while (auto line = child.ReadLine(std::chrono::seconds(std::lround(seconds) + 30))) {
    out += *line + "\n";
  }
  child.Wait();
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(Requests/sec:\s+([\d.]+))"))) {
    r.skipped = true;
    r.note = "wrk printed no rate: " + out;
    return r;
  }
  r.sessions_per_s = std::stod(m[1].str());
  if (load.transfer) {
    if (!std::regex_search(out, m, std::regex(R"(Transfer/sec:\s+([\d.]+)(B|KB|MB|GB))"))) {
      r.skipped = true;
      r.note = "wrk printed no transfer rate: " + out;
      return r;
    }
    const double x = std::stod(m[1].str());
    const std::string unit = m[2].str();
    // wrk's units are binary; MB here is 2^20 bytes too.
    r.sessions_per_s = unit == "GB"   ? x * 1024
                       : unit == "MB" ? x
                       : unit == "KB" ? x / 1024
                                      : x / 1048576;
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

// The median of each figure over rounds (errors and counts summed); a skipped round skips all.
Result Median(std::vector<Result> rounds) {
  Result m = rounds.front();
  for (const Result& r : rounds) {
    if (r.skipped) return r;
  }
  const auto median = [&](double Result::*field) {
    std::vector<double> v;
    for (const Result& r : rounds) v.push_back(r.*field);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  m.sessions_per_s = median(&Result::sessions_per_s);
  m.p50_ms = median(&Result::p50_ms);
  m.p99_ms = median(&Result::p99_ms);
  m.sessions = m.errors = 0;
  m.rounds = nlohmann::json::array();
  for (const Result& r : rounds) {
    m.sessions += r.sessions;
    m.errors += r.errors;
    m.rounds.push_back({{"rate_per_s", r.sessions_per_s},
                        {"p50_ms", r.p50_ms},
                        {"p99_ms", r.p99_ms},
                        {"errors", r.errors},
                        {"cpu_us_per_op", r.CpuUsPerOp()},
                        {"preempted", r.sched.preempted},
                        {"cpu_wait_ms", static_cast<double>(r.sched.wait_ns) / 1e6},
                        {"machine_cpu_us_per_op", r.machine_us_per_op}});
  }
  return m;
}

bool HttpAnswers(std::uint16_t port) {
  for (int i = 0; i < 200; ++i) {
    if (drover::testing::Http(port, "GET", "/").status == 200) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// The peers a goal is set against. Rates must match both; p99 and idle memory are set against
// HAProxy's (the other peer's ratio is in the table, not judged).
const std::vector<std::string> kBothPeers = {"haproxy", "nginx"};
const std::vector<std::string> kHaproxy = {"haproxy"};

// A goal, judged on its own: `figure` of Drover against each peer the goal names.
struct Verdict {
  std::string figure;
  std::vector<std::pair<std::string, double>> ratios;  // peer, Drover / peer
  double goal;                                         // the ratio to reach
  bool higher_is_better;
};
std::vector<Verdict> verdicts;

bool Names(const std::vector<std::string>& peers, const std::string& system) {
  return std::find(peers.begin(), peers.end(), system) != peers.end();
}

void Judge(const std::string& figure, const std::vector<Result>& results, bool rate, double goal,
           const std::vector<std::string>& peers) {
  const Result& drover = results[1];
  Verdict v{figure, {}, goal, rate};
  for (const Result& r : results) {
    if (!Names(peers, r.system) || r.skipped || drover.skipped) continue;
    const double peer = rate ? r.sessions_per_s : r.p99_ms;
    const double ours = rate ? drover.sessions_per_s : drover.p99_ms;
    if (peer > 0) v.ratios.emplace_back(r.system, ours / peer);
  }
  verdicts.push_back(std::move(v));
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
    if (!r.rounds.is_null()) j["rounds"] = r.rounds;
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

// Resident KiB of `pid` and its direct children.
std::uint64_t TreeRssKb(pid_t pid) {
  std::uint64_t total = 0;
  for (const int proc : ProcessTree(pid)) {
    total += drover::procfs::StatusField(proc, "VmRSS").value_or(0);
  }
  return total;
}

// Opens `count` sessions through the proxy at `port` to `sink`, waits until the sink holds them
// all, and returns the proxy's RSS growth per session in bytes (or a note why it could not).
struct IdleCost {
  double bytes_per_session = 0;
  std::string note;
};
// Once every connection is held: the proxy's RSS growth since `before` (KiB) per connection
// into `cost` (unless a note says the measure failed); then closes the connections.
void Settle(pid_t proxy, std::uint64_t before, const std::vector<int>& clients, IdleCost& cost) {
  std::this_thread::sleep_for(500ms);
  const std::uint64_t after = TreeRssKb(proxy);
  if (cost.note.empty() && !clients.empty()) {
    cost.bytes_per_session = after > before ? 1024.0 * static_cast<double>(after - before) /
                                                  static_cast<double>(clients.size())
                                            : 0.0;
  }
  for (const int fd : clients) ::close(fd);
}

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
  Settle(proxy, before, clients, cost);
  sink.DropAll();
  return cost;
}

// Opens `count` keep-alive HTTP clients to the proxy at `port`, each sending one GET and reading
// its answer, then holding the connection; returns the proxy's RSS growth per client in bytes.
IdleCost MeasureIdleHttp(pid_t proxy, std::uint16_t port, int count) {
  std::this_thread::sleep_for(300ms);
  const std::uint64_t before = TreeRssKb(proxy);
  std::vector<int> clients;
  clients.reserve(count);
  IdleCost cost;
  static const std::string request = "GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
  for (int i = 0; i < count && cost.note.empty(); ++i) {
    const int fd = ConnectLoopback(port);
    if (fd < 0) {
      cost.note = "connect " + std::to_string(i) + " failed: " + std::strerror(errno);
      break;
    }
    clients.push_back(fd);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request.size())) {
      cost.note = "request " + std::to_string(i) + " could not be sent";
      break;
    }
    // The answer is small: its head and the 2-byte body "ok".
    std::string answer;
    char buf[1024];
    while (answer.find("\r\n\r\nok") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        cost.note = "client " + std::to_string(i) + " got no whole answer: " + answer;
        break;
      }
      answer.append(buf, static_cast<std::size_t>(n));
    }
    if (cost.note.empty() && answer.rfind("HTTP/1.1 200", 0) != 0) {
      cost.note = "client " + std::to_string(i) + " got " + answer.substr(0, answer.find('\r'));
    }
  }
  Settle(proxy, before, clients, cost);
  return cost;
}

// One proxy under test.
struct Proxy {
  std::string system;
  std::uint16_t port = 0;
  drover::testing::ChildProcess* process = nullptr;  // null: skipped (see note)
  std::string note;
};

enum class Kind { kTcp, kIdle, kHttp };

// Starts the system's proxy for `kind` at `threads` threads in front of `upstreams`.
class Proxies {
 public:
  Proxies(const Options& o, std::string dir, std::uint16_t registry_grpc,
          std::vector<std::unique_ptr<drover::testing::ChildProcess>>& children)
      : o_(o), d_(std::move(dir)), grpc_(registry_grpc), children_(children) {}

  Proxy Drover(Kind kind, int threads) {
    const std::string name = kind == Kind::kTcp ? "zone" : kind == Kind::kIdle ? "idle" : "web";
    const std::string config = d_ + "/gateway-" + name + "-" + std::to_string(threads) + ".yaml";
    std::ofstream cfg(config);
    cfg << "registry: 127.0.0.1:" << grpc_ << "\nthreads: " << threads
        << "\nadmin: 127.0.0.1:0\nregister: false\nlisteners:\n  - name: " << name
        << "\n    address: 127.0.0.1:0\n    slow_start_ms: 0\n";
    if (kind == Kind::kHttp) {
      cfg << "    protocol: http\n    routes:\n      - prefix: /\n        service: web\n";
    } else if (kind == Kind::kTcp) {
      cfg << "    service: zone\n    policy: p2c\n";
    } else {
      // The sink only holds connections: a health check's would count as sessions.
      cfg << "    service: sink\n    policy: p2c\n    health_check_interval_ms: 0\n";
    }
    cfg.close();
    auto& gw = children_.emplace_back(std::make_unique<drover::testing::ChildProcess>(
        std::vector<std::string>{o_.drover, "--log-level", "warn", "gateway", "--config", config}));
    const auto line = gw->ReadLine(20s);
    if (!line) Fail("drover gateway (" + name + ") did not start");
    return {"drover", PortIn(*line, name + R"(=127\.0\.0\.1:(\d+))"), gw.get(), {}};
  }

  Proxy Haproxy(Kind kind, int threads, const std::vector<std::uint16_t>& upstreams) {
    const auto haproxy = FindInPath(o_.haproxy);
    if (!haproxy) return {"haproxy", 0, nullptr, "not installed"};
    const std::uint16_t port = FreePort();
    const std::string config = d_ + "/haproxy-" + std::to_string(static_cast<int>(kind)) + "-" +
                               std::to_string(threads) + ".cfg";
    std::ofstream cfg(config);
    cfg << "global\n  maxconn 9500\n  nbthread " << threads << "\ndefaults\n  mode "
        << (kind == Kind::kHttp ? "http" : "tcp")
        << "\n  timeout connect 1s\n  timeout client 60s\n  timeout server 60s\n"
        << "frontend f\n  bind 127.0.0.1:" << port << "\n  default_backend b\nbackend b\n"
        << "  balance leastconn\n";
    // (HTTP: HAProxy keeps server-side connections alive and shares them safely by default.)
    for (std::size_t i = 0; i < upstreams.size(); ++i) {
      cfg << "  server u" << i << " 127.0.0.1:" << upstreams[i] << "\n";
    }
    cfg.close();
    auto& peer = children_.emplace_back(std::make_unique<drover::testing::ChildProcess>(
        std::vector<std::string>{*haproxy, "-db", "-f", config}));
    graceful.push_back(peer.get());
    return {"haproxy", port, peer.get(), {}};
  }

  Proxy Nginx(Kind kind, int threads, const std::vector<std::uint16_t>& upstreams) {
    const auto nginx = FindInPath(o_.nginx);
    const std::string module = NginxStreamModule();
    if (!nginx) return {"nginx", 0, nullptr, "not installed"};
    if (kind != Kind::kHttp && module.empty()) {
      return {"nginx", 0, nullptr, "stream module not installed"};
    }
    const std::uint16_t port = FreePort();
    const std::string dir =
        d_ + "/nginx-" + std::to_string(static_cast<int>(kind)) + "-" + std::to_string(threads);
    std::filesystem::create_directories(dir + "/logs");
    std::ofstream cfg(dir + "/nginx.conf");
    if (kind != Kind::kHttp) cfg << "load_module " << module << ";\n";
    cfg << "worker_processes " << threads << ";\nworker_rlimit_nofile 20000;\ndaemon off;\npid "
        << dir << "/nginx.pid;\nerror_log stderr warn;\nevents { worker_connections 20000; }\n";
    if (kind == Kind::kHttp) {
      cfg << "http {\n  access_log off;\n  upstream b {\n    least_conn;\n";
      for (std::uint16_t p : upstreams) cfg << "    server 127.0.0.1:" << p << ";\n";
      cfg << "    keepalive 256;\n  }\n  server {\n    listen 127.0.0.1:" << port
          << ";\n    location / {\n      proxy_pass http://b;\n      proxy_http_version 1.1;\n"
          << "      proxy_set_header Connection \"\";\n    }\n  }\n}\n";
    } else {
      cfg << "stream {\n  upstream b {\n    least_conn;\n";
      for (std::uint16_t p : upstreams) cfg << "    server 127.0.0.1:" << p << ";\n";
      cfg << "  }\n  server {\n    listen 127.0.0.1:" << port
          << ";\n    proxy_pass b;\n    proxy_connect_timeout 1s;\n  }\n}\n";
    }
    cfg.close();
    auto& peer = children_.emplace_back(std::make_unique<drover::testing::ChildProcess>(
        std::vector<std::string>{*nginx, "-p", dir, "-c", dir + "/nginx.conf"}));
    graceful.push_back(peer.get());
    return {"nginx", port, peer.get(), {}};
  }

  // All three, in report order.
  std::vector<Proxy> All(Kind kind, int threads, const std::vector<std::uint16_t>& upstreams) {
    return {Drover(kind, threads), Haproxy(kind, threads, upstreams),
            Nginx(kind, threads, upstreams)};
  }

 private:
  const Options& o_;
  const std::string d_;
  const std::uint16_t grpc_;
  std::vector<std::unique_ptr<drover::testing::ChildProcess>>& children_;
};

void Stop(std::vector<Proxy>& proxies) {
  for (Proxy& p : proxies) {
    if (!p.process) continue;
    if (p.process->running()) {
      p.process->Signal(SIGTERM);
      p.process->Wait();
    }
    std::erase(graceful, p.process);
  }
}

// `rounds` rounds of `run` on every proxy (taking turns, each round starting with the next proxy,
// so that none always runs right after the same one), after one short warm-up each; returns
// {direct, drover, haproxy, nginx}, each the median of its rounds.
std::vector<Result> Rounds(const std::vector<Proxy>& proxies, Result direct, int rounds, bool show,
                           const std::function<Result(const Proxy&, bool warm_up)>& run) {
  std::vector<std::vector<Result>> per(proxies.size());
  for (const Proxy& p : proxies) {
    if (p.process) run(p, true);
  }
  if (show) {
    std::printf("  %-16s %12s %9s %9s %8s %9s %10s %9s %11s\n", "round", "rate", "p50 ms", "p99 ms",
                "errors", "CPU us/op", "preempted", "wait ms", "machine us");
  }
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < proxies.size(); ++k) {
      const std::size_t i = (static_cast<std::size_t>(r) + k) % proxies.size();
      if (!proxies[i].process) continue;
      // (/proc is read before the load starts and after it ended: nothing polls beside it.)
      const pid_t pid = proxies[i].process->pid();
      const SchedCounters::Threads before = SchedCounters::Of(pid);
      const double busy_before = MachineBusySeconds();
      Result& x = per[i].emplace_back(run(proxies[i], false));
      x.sched = SchedCounters::Since(before, SchedCounters::Of(pid));
      x.machine_us_per_op = (MachineBusySeconds() - busy_before) * 1e6 /
                            std::max<double>(1, static_cast<double>(x.sessions));
      if (show) {
        std::printf("  round %d %-8s %12.0f %9.2f %9.2f %8llu %9.1f %10llu %9.0f %11.1f\n", r + 1,
                    x.system.c_str(), x.sessions_per_s, x.p50_ms, x.p99_ms,
                    static_cast<unsigned long long>(x.errors), x.CpuUsPerOp(),
                    static_cast<unsigned long long>(x.sched.preempted),
                    static_cast<double>(x.sched.wait_ns) / 1e6, x.machine_us_per_op);
      }
    }
  }
  std::vector<Result> results = {std::move(direct)};
  for (std::size_t i = 0; i < proxies.size(); ++i) {
    if (!proxies[i].process) {
      results.push_back(Result{
          .system = proxies[i].system, .skipped = true, .note = proxies[i].note, .sched = {}});
    } else {
      results.push_back(Median(per[i]));
    }
  }
  return results;
}

// Prints (or adds to `report`) one idle-memory table; rows[0] is Drover's.
void ReportIdle(const std::string& title, const std::vector<std::pair<std::string, IdleCost>>& rows,
                const Options& o, nlohmann::json& report) {
  const double drover_bytes = rows.front().second.bytes_per_session;
  if (!o.json) {
    std::printf("%s\n%-22s %16s %16s %12s\n", title.c_str(), "system", "RSS B/conn",
                "MB per 10,000", "drover/x");
  }
  for (const auto& [system, cost] : rows) {
    nlohmann::json j = {{"bytes_per_session", cost.bytes_per_session}};
    if (!cost.note.empty()) j["note"] = cost.note;
    const bool peer = system != "drover" && cost.note.empty() && cost.bytes_per_session > 0;
    if (peer) j["drover_ratio"] = drover_bytes / cost.bytes_per_session;
    report[system] = j;
    if (o.json) continue;
    if (!cost.note.empty()) {
      std::printf("%-22s failed: %s\n", system.c_str(), cost.note.c_str());
      continue;
    }
    std::printf("%-22s %16.0f %16.1f", system.c_str(), cost.bytes_per_session,
                cost.bytes_per_session * 10000 / 1e6);
    if (peer) std::printf(" %11.2fx", drover_bytes / cost.bytes_per_session);
    std::printf("\n");
  }
}

void JudgeIdle(const std::string& figure, const std::vector<std::pair<std::string, IdleCost>>& rows,
               const std::vector<std::string>& peers) {
  Verdict v{figure, {}, 1.0, false};
  const IdleCost& drover = rows.front().second;
  for (const auto& [system, cost] : rows) {
    if (!Names(peers, system) || !cost.note.empty() || !drover.note.empty()) continue;
    // A peer whose RSS did not grow measurably is taken at 1 byte: Drover meets it only at 0.
    v.ratios.emplace_back(system, drover.bytes_per_session / std::max(cost.bytes_per_session, 1.0));
  }
  verdicts.push_back(std::move(v));
}

void PrintVerdicts(const Options& o, nlohmann::json& report) {
  if (!o.json)
    std::printf("\nverdicts (each figure on its own, against each peer its goal names):\n");
  for (const Verdict& v : verdicts) {
    bool met = !v.ratios.empty();
    std::string ratios;
    for (const auto& [peer, ratio] : v.ratios) {
      const bool ok = v.higher_is_better ? ratio >= v.goal : ratio <= v.goal;
      met = met && ok;
      ratios += fmt::format("{}{} {:.2f}x", ratios.empty() ? "" : ", ", peer, ratio);
      report["verdicts"][v.figure][peer] = {{"ratio", ratio}, {"met", ok}};
    }
    report["verdicts"][v.figure]["met"] = met;
    if (o.json) continue;
    std::printf("verdict: %-44s goal drover/x %s %.2f: %s -- %s\n", v.figure.c_str(),
                v.higher_is_better ? ">=" : "<=", v.goal,
                ratios.empty() ? "no peer measured" : ratios.c_str(), met ? "met" : "NOT met");
  }
}

}  // namespace

int BenchMain(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Drover's gateway against HAProxy and nginx: TCP sessions, HTTP requests, bytes and idle "
      "memory, at 1 and 2 threads per proxy, medians of rounds"};
  app.add_option("--clients", o.clients, "Concurrent players (closed loop)")->capture_default_str();
  app.add_option("--seconds", o.seconds, "Measured TCP time per system and round")
      ->capture_default_str();
  app.add_option("--upstreams", o.upstreams, "Zone server processes behind every TCP proxy")
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "Worker threads of every proxy; each count is one pass of every part")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--rounds", o.rounds, "Rounds per figure (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 99));
  app.add_option("--drover", o.drover, "drover binary (the registry and the gateway)")
      ->capture_default_str();
  app.add_option("--haproxy", o.haproxy, "haproxy binary")->capture_default_str();
  app.add_option("--nginx", o.nginx, "nginx binary")->capture_default_str();
  app.add_option("--http-connections", o.http_connections, "wrk connections")
      ->capture_default_str();
  app.add_option("--http-seconds", o.http_seconds, "Measured wrk time per system and round")
      ->capture_default_str();
  app.add_option("--wrk", o.wrk, "wrk binary")->capture_default_str();
  app.add_flag("!--no-tcp", o.tcp, "Skip the TCP parts (sessions and idle sessions)");
  app.add_flag("!--no-http", o.http, "Skip the HTTP parts (requests, bytes and idle clients)");
  app.add_flag("--json", o.json, "Print the report as JSON");
  app.add_flag("--show-rounds", o.show_rounds,
               "Also print every measured round as it ends: rate, p50 ms, p99 ms, errors, and the "
               "proxy's CPU us per request or session, times preempted and ms waiting for a "
               "CPU (its threads' and workers', from /proc), and the busy CPU time of the whole "
               "machine per request or session (/proc/stat: what the proxy costs its peers too); "
               "in --json always, as \"rounds\"");
  app.add_option("--idle-sessions", o.idle_sessions,
                 "Idle TCP sessions held through every proxy for the memory figure (0: skip; "
                 "each takes two of the proxy's descriptors)")
      ->capture_default_str()
      ->check(CLI::Range(0, 9500));
  app.add_option("--idle-http-clients", o.idle_http_clients,
                 "Idle keep-alive HTTP clients held by every proxy for the memory figure (0: skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 9000));
  if (const auto code = drover::cli::ParseCommandLine(app, argc, argv)) return *code;

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
  const auto register_instance = [&](const std::string& service, const std::string& id,
                                     std::uint16_t port) {
    const auto put =
        drover::testing::Http(registry_http, "PUT", "/v1/services/" + service + "/instances/" + id,
                              R"({"address":"127.0.0.1:)" + std::to_string(port) +
                                  R"(","generation":1,"state":"READY","ttl_ms":3600000})");
    if (put.status != 200) Fail("registering " + service + "/" + id + " failed: " + put.body);
  };
  Proxies start(o, d, grpc_port, children);
  nlohmann::json report;

  // TCP upstreams: zone servers registered through ServerHost.
  std::vector<std::uint16_t> zone_ports;
  if (o.tcp) {
    for (int i = 0; i < o.upstreams; ++i) {
      auto& z = children.emplace_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          o.zone_server, "--registry", "127.0.0.1:" + std::to_string(grpc_port), "--id",
          "u" + std::to_string(i), "--warmup-ms", "0", "--health", "127.0.0.1:0", "--log-level",
          "warn"}));
      z->ReadLine(20s);
      const auto serving = z->ReadLine(20s);
      if (!serving) Fail("a zone server did not start");
      zone_ports.push_back(PortIn(*serving, R"(serving at 127\.0\.0\.1:(\d+))"));
    }
  }
  std::optional<Sink> sink;
  if (o.tcp && o.idle_sessions > 0) {
    sink.emplace();
    register_instance("sink", "s0", sink->port());
  }
  // HTTP upstream: one nginx worker answering `return 200` and serving a 1 MiB file.
  const auto nginx = FindInPath(o.nginx);
  const auto wrk = FindInPath(o.wrk);
  const bool http = o.http && nginx && wrk;
  std::uint16_t web_port = 0;
  if (o.http && !http) {
    report["http"]["skipped"] = std::string(!wrk ? "wrk" : "nginx") + " not installed";
    if (!o.json) {
      std::printf("gateway_bench http: skipped, %s not installed\n", !wrk ? "wrk" : "nginx");
    }
  } else if (http) {
    web_port = FreePort();
    std::filesystem::create_directories(d + "/upstream/logs");
    std::filesystem::create_directories(d + "/upstream/html");
    // nginx's workers drop root: they must be able to reach the file.
    for (const std::string& p : {d, d + "/upstream", d + "/upstream/html"}) {
      std::filesystem::permissions(
          p, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                 std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                 std::filesystem::perms::others_exec);
    }
    {
      std::ofstream big(d + "/upstream/html/big.bin", std::ios::binary);
      const std::string block(1024, 'x');
      for (int i = 0; i < 1024; ++i) big << block;
      std::ofstream cfg(d + "/upstream/nginx.conf");
      cfg << "worker_processes 1;\ndaemon off;\npid " << d << "/upstream/nginx.pid;\n"
          << "error_log stderr warn;\nevents { worker_connections 4096; }\nhttp {\n"
          << "  access_log off;\n  keepalive_requests 1000000;\n  sendfile on;\n  server {\n"
          << "    listen 127.0.0.1:" << web_port << ";\n    location / { return 200 \"ok\"; }\n"
          << "    location = /big.bin { root " << d << "/upstream/html; }\n  }\n}\n";
    }
    upstream_peer = children
                        .emplace_back(std::make_unique<ChildProcess>(std::vector<std::string>{
                            *nginx, "-p", d + "/upstream", "-c", d + "/upstream/nginx.conf"}))
                        .get();
    if (!HttpAnswers(web_port)) Fail("the nginx upstream does not answer");
    register_instance("web", "h0", web_port);
  }

  for (const int threads : o.threads) {
    const std::string t = std::to_string(threads) + (threads == 1 ? " thread" : " threads");
    nlohmann::json& pass = report["threads_" + std::to_string(threads)];

    if (o.tcp) {
      std::vector<Proxy> proxies = start.All(Kind::kTcp, threads, zone_ports);
      for (const Proxy& p : proxies) {
        if (p.process && !Answers(p.port)) Fail(p.system + " does not route TCP");
      }
      Run("direct", zone_ports[0], o, 0.3);  // warm-up, discarded
      const std::vector<Result> results =
          Rounds(proxies, Run("direct (one upstream)", zone_ports[0], o, o.seconds), o.rounds,
                 o.show_rounds && !o.json, [&](const Proxy& p, bool warm_up) {
                   return Run(p.system, p.port, o, warm_up ? 0.3 : o.seconds);
                 });
      Stop(proxies);
      Report(fmt::format("gateway_bench tcp: {} clients, {} upstreams, {} per proxy, median of "
                         "{} rounds of {:.1f} s",
                         o.clients, o.upstreams, t, o.rounds, o.seconds)
                 .c_str(),
             "sessions/s", results, o, pass["tcp"]);
      Judge("tcp sessions/s, " + t, results, true, 1.0, kBothPeers);
    }

    if (sink) {
      // Until a connection through `port` reaches the sink.
      const auto reaches_sink = [&](std::uint16_t port) {
        for (int i = 0; i < 100; ++i) {
          const int fd = ConnectLoopback(port);
          const bool connected = fd >= 0;
          std::this_thread::sleep_for(100ms);
          if (connected) ::close(fd);
          const bool reached = connected && sink->held() > 0;
          sink->DropAll();
          if (reached) return true;
        }
        return false;
      };
      std::vector<std::pair<std::string, IdleCost>> rows;
      std::vector<Proxy> proxies = start.All(Kind::kIdle, threads, {sink->port()});
      for (const Proxy& p : proxies) {
        if (!p.process) continue;
        if (!reaches_sink(p.port)) Fail(p.system + " does not reach the idle sink");
        rows.emplace_back(p.system, MeasureIdle(p.process->pid(), p.port, *sink, o.idle_sessions));
      }
      Stop(proxies);
      ReportIdle(fmt::format("gateway_bench idle tcp: {} idle TCP sessions held through each "
                             "proxy, {} per proxy",
                             o.idle_sessions, t),
                 rows, o, pass["idle_tcp"]);
      JudgeIdle("memory per idle tcp session, " + t, rows, kHaproxy);
    }

    if (http) {
      std::vector<Proxy> proxies = start.All(Kind::kHttp, threads, {web_port});
      for (const Proxy& p : proxies) {
        if (p.process && !HttpAnswers(p.port)) Fail(p.system + " does not route HTTP");
      }
      struct Mode {
        const char* key;
        const char* title;
        WrkLoad load;
        const char* unit;
      };
      for (const Mode& m :
           {Mode{"http_keepalive", "keep-alive GET (2-byte body)", {}, "requests/s"},
            Mode{"http_close",
                 "GET with Connection: close (a new connection each)",
                 {.close = true},
                 "requests/s"},
            Mode{"http_1mib",
                 "keep-alive GET of 1 MiB",
                 {.path = "/big.bin", .transfer = true},
                 "MB/s"}}) {
        RunWrk(*wrk, "direct", web_port, o, 0.5, m.load);  // warm-up, discarded
        const std::vector<Result> results = Rounds(
            proxies, RunWrk(*wrk, "direct (no proxy)", web_port, o, o.http_seconds, m.load),
            o.rounds, o.show_rounds && !o.json, [&](const Proxy& p, bool warm_up) {
              return RunWrk(*wrk, p.system, p.port, o, warm_up ? 0.5 : o.http_seconds, m.load);
            });
        Report(fmt::format("gateway_bench http: wrk -t2 -c{} {}, {} per proxy, median of {} "
                           "rounds of {:.0f} s",
                           o.http_connections, m.title, t, o.rounds, o.http_seconds)
                   .c_str(),
               m.unit, results, o, pass[m.key]);
        const std::string key = m.key;
        if (key == "http_1mib") {
          Judge("http 1 MiB MB/s, " + t, results, true, 0.9, kBothPeers);
        } else if (key == "http_close") {
          Judge("http new-connection req/s, " + t, results, true, 1.0, kBothPeers);
        } else {
          Judge("http keep-alive req/s, " + t, results, true, 1.0, kBothPeers);
          Judge("http keep-alive p99, " + t, results, false, 1.0, kHaproxy);
        }
      }
      if (o.idle_http_clients > 0) {
        std::vector<std::pair<std::string, IdleCost>> rows;
        for (const Proxy& p : proxies) {
          if (!p.process) continue;
          rows.emplace_back(p.system,
                            MeasureIdleHttp(p.process->pid(), p.port, o.idle_http_clients));
        }
        ReportIdle(fmt::format("gateway_bench idle http: {} idle keep-alive HTTP clients held by "
                               "each proxy (one request each), {} per proxy",
                               o.idle_http_clients, t),
                   rows, o, pass["idle_http"]);
        JudgeIdle("memory per idle http client, " + t, rows, kHaproxy);
      }
      Stop(proxies);
    }
  }
  StopPeers();
  PrintVerdicts(o, report);
  if (o.json) std::printf("%s\n", report.dump(2).c_str());
  return 0;
}

// Whatever throws ends the run with what it was (the peers stopped on the way out), not an abort.
int main(int argc, char** argv) {
  try {
    return BenchMain(argc, argv);
  } catch (const std::exception& e) {
    Fail(std::string("unexpected error: ") + e.what());
  }
}
