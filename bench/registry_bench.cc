// Registry benchmark: a real `drover registry` -- on its embedded SQLite store, and on an etcd
// store (`--store etcd`) -- and a real etcd, each started as a child process on loopback with its
// own temporary data directory, driven by the same gRPC client (the bench's own, grpc_load.h) with
// the same number of concurrent clients.
//
//   registrations/s  N new instances registered (Drover) | N new keys put (etcd), clients in
//                    closed loops; both make every acknowledged write durable (fsync). Measured
//                    in --rounds rounds that take turns between the systems (their servers up
//                    at once), each figure the median of its rounds
//   heartbeats/s     unary Heartbeat for --seconds | etcd LeaseKeepAlive on one stream per client
//                    (etcd's own heartbeat), and etcd Put overwriting keys
//   watch latency    --watchers streams watch the N instances (one service | one key prefix);
//                    one writer changes an instance every --interval-ms; each sample is the time
//                    from just before the write is sent until a watcher holds the event, so it
//                    includes the durable commit; printed again "after ack": from when the writer
//                    had the write's answer (committed) until a watcher holds the event
//   memory           RSS growth per registered instance (key) and per idle watch stream, in the
//                    run; and per idle watch stream again in a fresh server (Drover: one each
//                    for gRPC and HTTP; etcd: its own), from --idle-watchers/2 streams to
//                    --idle-watchers: what one more stream costs, without fixed costs or memory
//                    the run gave back to the allocator (the goal lines judge these)
//
// Every figure is printed next to etcd's as a ratio (Drover / etcd; above 1 is better for rates,
// below 1 is better for latencies); the etcd-store column shows what the registry costs on top of
// the etcd it runs on. Nothing leaves 127.0.0.1.
#include <absl/synchronization/mutex.h>
#include <arpa/inet.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef DROVER_BENCH_URING
#include <liburing.h>
#endif

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/host_port.h"
#include "common/procfs.h"
#include "drover/cli.h"
#include "drover/registry/v1/registry.grpc.pb.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "grpc_load.h"
#include "testing/child_process.h"
#include "testing/http_client.h"
#include "testing/temp_dir.h"

namespace {

namespace pb = ::drover::registry::v1;
namespace etcd = ::etcdserverpb;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string drover;
  std::string etcd = "etcd";
  std::string stores = "both";  // drover's store: sqlite | etcd | both
  int clients = 64;
  int connections = 4;
  double seconds = 3;
  int instances = 10'000;
  int watchers = 1'000;
  int writes = 300;
  int interval_ms = 20;
  int warmup = 5;
  int batch = 10;
  int watch_connections = 10;
  int idle_watchers = 10'000;
  int restart_instances = 100'000;
  int rounds = 3;
  std::string http_watch_reader = "io_uring";  // io_uring (epoll where refused) | epoll
  int http_watch_threads = 0;                  // 0: one per CPU, as the gRPC watchers' loops
  bool json = false;
};

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "registry_bench: %s\n", what.c_str());
  std::exit(1);
}

std::string FindInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::filesystem::path candidate = std::filesystem::path(dirs.substr(start, end - start)) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return {};
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Fail("cannot find a free loopback port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A gRPC C++ channel of its own connection (gRPC's global subchannel pool would share one between
// channels to the same target), for the bench's setup and checks and for polling a server that
// is starting.
std::shared_ptr<grpc::Channel> FreshChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(-1);  // a whole list: more than gRPC's 4 MiB
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

// The same, connected.
std::shared_ptr<grpc::Channel> Connect(const std::string& target) {
  auto channel = FreshChannel(target);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + 10s)) {
    Fail("cannot connect to " + target);
  }
  return channel;
}

// ---------------------------------------------------------------------------------------------
// Closed-loop load: `clients` loops, each starting its next request when the previous completes.

class ClosedLoop {
 public:
  // Starts request number `seq` for client `client` and calls `done(ok)` when it completes.
  using Issue = std::function<void(int client, std::uint64_t seq, std::function<void(bool)> done)>;

  struct Result {
    double per_second = 0;
    std::uint64_t errors = 0;
  };

  // Runs until `total` requests have completed; the rate covers all of them.
  static Result Count(int clients, std::uint64_t total, const Issue& issue) {
    ClosedLoop loop(issue, total);
    const auto start = Clock::now();
    loop.Start(clients);
    loop.WaitIdle();
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    return {static_cast<double>(loop.completed_.load()) / secs, loop.errors_.load()};
  }

  // Runs for `warmup` + `measure`; the rate covers the completions within `measure`.
  static Result For(int clients, Clock::duration warmup, Clock::duration measure,
                    const Issue& issue) {
    ClosedLoop loop(issue, UINT64_MAX);
    loop.Start(clients);
    std::this_thread::sleep_for(warmup);
    const std::uint64_t c0 = loop.completed_.load();
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(measure);
    const std::uint64_t c1 = loop.completed_.load();
    const auto t1 = Clock::now();
    loop.stop_ = true;
    loop.WaitIdle();
    const double secs = std::chrono::duration<double>(t1 - t0).count();
    return {static_cast<double>(c1 - c0) / secs, loop.errors_.load()};
  }

 private:
  ClosedLoop(const Issue& issue, std::uint64_t total) : issue_(issue), total_(total) {}

  void Start(int clients) {
    active_ = clients;
    for (int c = 0; c < clients; ++c) Next(c);
  }

  void Next(int client) {
    const std::uint64_t seq = stop_ ? total_ : next_.fetch_add(1);
    if (seq >= total_) {
      std::lock_guard lock(mu_);
      if (--active_ == 0) idle_.notify_all();
      return;
    }
    issue_(client, seq, [this, client](bool ok) {
      completed_.fetch_add(1);
      if (!ok) errors_.fetch_add(1);
      Next(client);
    });
  }

  void WaitIdle() {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return active_ == 0; });
  }

  const Issue& issue_;
  const std::uint64_t total_;
  std::atomic<std::uint64_t> next_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> errors_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;  // guarded by mu_
};

// The load's calls run on the bench's own gRPC client (grpc_load.h): a few microseconds of CPU
// per call, where gRPC C++'s client took 28 us per unary Heartbeat and 9 us per watch event on
// its completion queues (34 and 10.8 on its callback API) -- CPU the servers measured beside it
// did not get. gRPC C++'s client does the setup and the checks.
namespace paths {
constexpr std::string_view kRegister = "/drover.registry.v1.Registry/Register";
constexpr std::string_view kHeartbeat = "/drover.registry.v1.Registry/Heartbeat";
constexpr std::string_view kKeepAlive = "/drover.registry.v1.Registry/KeepAlive";
constexpr std::string_view kWatch = "/drover.registry.v1.Registry/Watch";
constexpr std::string_view kEtcdPut = "/etcdserverpb.KV/Put";
constexpr std::string_view kEtcdKeepAlive = "/etcdserverpb.Lease/LeaseKeepAlive";
constexpr std::string_view kEtcdWatch = "/etcdserverpb.Watch/Watch";
}  // namespace paths

// ---------------------------------------------------------------------------------------------
// Watch latency bookkeeping shared by both systems.

// Arrival times are kept raw and turned into latencies at the end, because the send times come
// from the writer process and may be read after the events they caused.
struct Arrival {
  int write;
  std::int64_t at_ns;
};

class LatencyProbe {
 public:
  // The first `warmup` writes are delivered but not measured (connections and buffers warm up).
  LatencyProbe(int writes, int watchers, int warmup)
      : sent_(static_cast<std::size_t>(warmup + writes) + 1),
        acked_(sent_.size()),
        warmup_(warmup),
        expected_(static_cast<std::uint64_t>(writes) * static_cast<std::uint64_t>(watchers)) {}
  int total_writes() const { return static_cast<int>(sent_.size()) - 1; }

  void Sent(int write, std::int64_t at_ns) {
    if (write >= 1 && write < static_cast<int>(sent_.size())) sent_[write] = at_ns;
  }
  // The writer had the write's answer: it is committed (durable) by then.
  void Acked(int write, std::int64_t at_ns) {
    if (write >= 1 && write < static_cast<int>(acked_.size())) acked_[write] = at_ns;
  }

  // A watcher received write number `write` (1-based); `arrivals` is that watcher's own list.
  void Received(std::int64_t write, std::vector<Arrival>& arrivals) {
    if (write <= warmup_ || write >= static_cast<std::int64_t>(sent_.size())) return;
    arrivals.push_back({static_cast<int>(write), NowNs()});
    if (received_.fetch_add(1) + 1 == expected_) {
      std::lock_guard lock(mu_);
      all_in_.notify_all();
    }
  }

  bool WaitAll(Clock::duration timeout) {
    std::unique_lock lock(mu_);
    return all_in_.wait_for(lock, timeout, [&] { return received_.load() >= expected_; });
  }
  std::uint64_t expected() const { return expected_; }

  // Each arrival's time since its write was sent, and since it was acknowledged (negative when
  // the watcher had it before the writer had the answer). Call once the writer has finished and
  // every watcher is closed.
  struct Samples {
    std::vector<std::int64_t> from_send, from_ack;
  };
  void Collect(const std::vector<Arrival>& arrivals, Samples& out) const {
    for (const Arrival& a : arrivals) {
      out.from_send.push_back(a.at_ns - sent_[a.write]);
      out.from_ack.push_back(a.at_ns - acked_[a.write]);
    }
  }

 private:
  // Written by the reader of the writer process only.
  std::vector<std::int64_t> sent_;
  std::vector<std::int64_t> acked_;
  const int warmup_;
  const std::uint64_t expected_;
  std::atomic<std::uint64_t> received_{0};
  std::mutex mu_;
  std::condition_variable all_in_;
};

struct Latency {
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  std::uint64_t samples = 0, missing = 0;
};

// The latencies from the writes' sending and from their acknowledgement.
struct WatchLatency {
  Latency from_send, from_ack;
};

Latency Summarise(std::vector<std::int64_t> all, std::uint64_t expected);

WatchLatency Summarise(LatencyProbe::Samples samples, std::uint64_t expected) {
  return {Summarise(std::move(samples.from_send), expected),
          Summarise(std::move(samples.from_ack), expected)};
}

Latency Summarise(std::vector<std::int64_t> all, std::uint64_t expected) {
  Latency out;
  out.samples = all.size();
  out.missing = expected > all.size() ? expected - all.size() : 0;
  if (all.empty()) return out;
  auto pct = [&](double p) {
    auto idx = static_cast<std::size_t>(p * static_cast<double>(all.size() - 1));
    std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(idx), all.end());
    return static_cast<double>(all[idx]) / 1e6;
  };
  out.p50_ms = pct(0.50);
  out.p99_ms = pct(0.99);
  out.max_ms = static_cast<double>(*std::max_element(all.begin(), all.end())) / 1e6;
  return out;
}

// The writer runs in its own process (`--write-to`), as an instance changing its state is not in
// the process of the gateways watching it. It paces `writes` sequential writes `interval` apart,
// printing "sent K NS" (CLOCK_MONOTONIC, shared by every process here) before write K.
void PacedWrites(int writes, std::chrono::milliseconds interval,
                 const std::function<void(int)>& write) {
  auto next = Clock::now();
  for (int k = 1; k <= writes; ++k) {
    std::this_thread::sleep_until(next);
    next += interval;
    std::printf("sent %d %lld\n", k, static_cast<long long>(NowNs()));
    std::fflush(stdout);
    write(k);
    std::printf("acked %d %lld\n", k, static_cast<long long>(NowNs()));
    std::fflush(stdout);
  }
  std::printf("done\n");
  std::fflush(stdout);
}

// Starts the writer process for `system` and records its send times until it is done.
void RemoteWrites(const Options& opt, const std::string& system, const std::string& target,
                  std::int64_t base, LatencyProbe& probe) {
  drover::testing::ChildProcess writer(
      {std::filesystem::read_symlink("/proc/self/exe").string(), "--write-to", target, "--system",
       system, "--base", std::to_string(base), "--instances", std::to_string(opt.instances),
       "--writes", std::to_string(probe.total_writes()), "--interval-ms",
       std::to_string(opt.interval_ms)});
  while (true) {
    auto line = writer.ReadLine(60s);
    if (!line) Fail(system + ": the writer process stopped early");
    if (*line == "done") break;
    int k = 0;
    long long ns = 0;
    if (std::sscanf(line->c_str(), "sent %d %lld", &k, &ns) == 2) probe.Sent(k, ns);
    if (std::sscanf(line->c_str(), "acked %d %lld", &k, &ns) == 2) probe.Acked(k, ns);
  }
  if (writer.Wait() != 0) Fail(system + ": the writer process failed");
}

// A TCP connection to `address` (an IPv4 ip:port, as the servers here listen), or the run fails
// naming `what`.
int ConnectTo(const std::string& address, const std::string& what) {
  auto hp = drover::ParseHostPort(address, what, {.require_ip = true, .ipv4_only = true});
  const int fd = hp.ok() ? drover::testing::ConnectTo(hp->host, hp->port) : -1;
  if (fd < 0) Fail(what + ": cannot connect to " + address);
  return fd;
}

// Closed loops of HTTP/1.1 requests: `clients` keep-alive connections to `address` (ip:port),
// driven by two threads (an epoll loop each, over half the connections). Each connection sends a
// request, reads its whole response (by its Content-Length) and sends the next, until `total`
// have completed; the rate covers all of them, and a status other than 200 is an error. The
// client costs little per request, so the server's cost is what shows.
class HttpLoop {
 public:
  using MakeRequest = std::function<std::string(std::uint64_t seq)>;

  static ClosedLoop::Result Count(const std::string& address, int clients, std::uint64_t total,
                                  const MakeRequest& make) {
    HttpLoop loop(make, total);
    constexpr int kThreads = 2;
    std::vector<std::vector<Conn>> shards(kThreads);
    for (int c = 0; c < clients; ++c) {
      Conn conn;
      conn.fd = ConnectTo(address, "http");
      const int one = 1;
      ::setsockopt(conn.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      shards[static_cast<std::size_t>(c % kThreads)].push_back(std::move(conn));
    }
    const auto start = Clock::now();
    {
      std::vector<std::jthread> threads;
      for (auto& shard : shards) threads.emplace_back([&loop, &shard] { loop.Run(shard); });
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    for (auto& shard : shards) {
      for (Conn& c : shard) ::close(c.fd);
    }
    return {static_cast<double>(loop.completed_.load()) / secs, loop.errors_.load()};
  }

 private:
  struct Conn {
    int fd = -1;
    std::string in;  // the response so far
    bool active = false;
  };

  HttpLoop(const MakeRequest& make, std::uint64_t total) : make_(make), total_(total) {}

  // Sends `c` its next request; false (and the connection is done) once all are taken.
  bool Next(Conn& c) {
    const std::uint64_t seq = next_.fetch_add(1);
    if (seq >= total_) return c.active = false;
    const std::string request = make_(seq);
    if (::send(c.fd, request.data(), request.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request.size()))
      Fail("http: a request could not be sent");
    return c.active = true;
  }

  // The status of the complete response at the start of `in`, removed from it; 0 while it is
  // incomplete. Parsed in place (no copy of the head): the figure is the server's, and this
  // client shares its cores.
  static int TakeResponse(std::string& in) {
    const std::string_view all(in);
    const std::size_t end = all.find("\r\n\r\n");
    if (end == std::string_view::npos) return 0;
    const std::string_view head = all.substr(0, end);
    int status = 0;
    if (!head.starts_with("HTTP/1.1 ") || head.size() < 12 ||
        std::from_chars(head.data() + 9, head.data() + 12, status).ec != std::errc()) {
      Fail("http: a response without a status line: " + std::string(head));
    }
    std::optional<std::size_t> length;
    constexpr std::string_view kLength = "content-length:";
    for (std::size_t at = head.find("\r\n"); at != std::string_view::npos && !length;
         at = head.find("\r\n", at + 2)) {
      std::string_view line = head.substr(at + 2);
      line = line.substr(0, line.find("\r\n"));
      if (line.size() <= kLength.size() ||
          ::strncasecmp(line.data(), kLength.data(), kLength.size()) != 0) {
        continue;
      }
      std::string_view value = line.substr(kLength.size());
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      std::size_t n = 0;
      if (std::from_chars(value.data(), value.data() + value.size(), n).ec == std::errc()) {
        length = n;
      }
    }
    if (!length) Fail("http: a response without Content-Length: " + std::string(head));
    if (in.size() < end + 4 + *length) return 0;
    in.erase(0, end + 4 + *length);
    return status;
  }

  void Run(std::vector<Conn>& conns) {
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    int active = 0;
    for (std::size_t i = 0; i < conns.size(); ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      ::epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
      active += Next(conns[i]) ? 1 : 0;
    }
    std::vector<epoll_event> events(256);
    char buf[16384];
    auto last = Clock::now();
    while (active > 0) {
      const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 1000);
      if (n <= 0) {
        if (Clock::now() - last > 60s) Fail("http: no response for a minute");
        continue;
      }
      last = Clock::now();
      for (int e = 0; e < n; ++e) {
        Conn& c = conns[events[static_cast<std::size_t>(e)].data.u64];
        const ssize_t got = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN)) Fail("http: the server closed a connection");
        if (got < 0) continue;
        c.in.append(buf, static_cast<std::size_t>(got));
        while (c.active) {
          const int status = TakeResponse(c.in);
          if (status == 0) break;
          completed_.fetch_add(1);
          if (status != 200) errors_.fetch_add(1);
          if (!Next(c)) --active;
        }
      }
    }
    ::close(ep);
  }

  const MakeRequest& make_;
  const std::uint64_t total_;
  std::atomic<std::uint64_t> next_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> errors_{0};
};

struct SystemFigures {
  double registrations_per_s = 0;
  // The same over HTTP/JSON with the same number of clients: Drover's PUT
  // /v1/services/{service}/instances/{id} | a put through etcd's JSON gateway (POST /v3/kv/put).
  double http_registrations_per_s = 0;
  // Drover: store commits (SQLite: transactions, each one fsync) and the writes they held while
  // registering, from the registry's metrics.
  double store_commits = 0;
  double committed_writes = 0;
  // Resident memory the server grew by per registered instance (etcd: per key) and per idle
  // watch stream, from /proc/<pid>/status before and after.
  double rss_per_instance_b = 0;
  double rss_per_watcher_b = 0;
  // Drover: the same per idle watch stream of each API, each measured in a registry of its own
  // (started fresh with two instances, so no stream reuses memory the run gave back).
  double idle_grpc_watch_b = 0;
  double idle_http_watch_b = 0;
  // Restart with --restart-instances stored (SQLite | etcd's own data): seconds from starting
  // the process until a list holds them all, and its resident memory then per instance, over
  // that of the same server started empty.
  double restart_s = 0;
  double restart_rss_per_instance_b = 0;
  double unary_heartbeats_per_s = 0;    // Drover only: one Heartbeat call each
  double keepalive_per_s = 0;           // one per stream message: Drover KeepAlive | etcd's
  double batched_heartbeats_per_s = 0;  // Drover only: --batch heartbeats per KeepAlive message
  double puts_per_s = 0;                // etcd only: Put overwriting keys
  WatchLatency watch;                   // gRPC Watch
  WatchLatency http_watch;              // Drover only: GET /v1/watch
  std::string http_watch_reader;        // how the bench's HTTP watchers read: io_uring | epoll
  int http_watch_threads = 0;           // and by how many threads
  std::uint64_t errors = 0;
};

std::string InstanceId(std::uint64_t i) { return fmt::format("inst-{:05d}", i); }

// A bidirectional call run as a closed loop: write the request, read the reply, repeat.
class PingPong final : public grpc_load::Call {
 public:
  using Check = std::function<bool(std::string_view reply)>;

  PingPong(grpc_load::Connection& connection, std::string_view path, std::string request,
           Check check)
      : Call(connection), path_(path), request_(std::move(request)), check_(std::move(check)) {}
  // Sends the request once; `done` runs when the reply arrives (on the connection's thread).
  // Called again only from `done` or after it ran.
  void Send(std::function<void(bool)> done) {
    done_ = std::move(done);
    if (!opened_) {
      opened_ = true;
      Start(path_, request_, false);
    } else {
      Write(request_);
    }
  }
  void OnMessage(std::string_view reply) override { Complete(check_(reply)); }
  void OnClose(int grpc_status) override {
    Complete(false);
    Call::OnClose(grpc_status);
  }

 private:
  void Complete(bool ok) {
    auto done = std::move(done_);
    done_ = nullptr;
    if (done) done(ok);
  }

  const std::string_view path_;
  const std::string request_;
  const Check check_;
  std::function<void(bool)> done_;
  bool opened_ = false;
};

// Runs one PingPong per client for the measured period.
ClosedLoop::Result StreamLoop(const Options& opt, std::vector<std::unique_ptr<PingPong>>& streams) {
  auto result = ClosedLoop::For(
      static_cast<int>(streams.size()), 500ms,
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.seconds)),
      [&](int c, std::uint64_t, auto done) { streams[static_cast<std::size_t>(c)]->Send(done); });
  for (auto& s : streams) s->Close();
  return result;
}

// Whether `bytes` parse as a `Message` that `check` accepts.
template <typename Message, typename Check>
bool Parsed(std::string_view bytes, Check check) {
  Message m;
  return m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) && check(m);
}

// ---------------------------------------------------------------------------------------------
// Drover

class DroverServer {
 public:
  // On SQLite, or on the etcd at `etcd_target` when that is given. `watchers` gRPC and as many
  // HTTP watch streams come from this one client address and must all be admitted (the registry
  // allows 64 per address by default, counting both APIs together).
  // `data_dir`: an SQLite data directory to use (and keep) instead of a temporary one.
  DroverServer(const std::string& binary, const std::string& etcd_target, int watchers,
               const std::string& data_dir = "")
      : process_(Args(binary, data_dir.empty() ? dir_.path() : data_dir, etcd_target, watchers)) {
    auto line = process_.ReadLine(30s);
    if (!line) Fail("drover registry did not start");
    target_ = Address(*line, "grpc://");
    http_ = Address(*line, "http://");
  }
  const std::string& target() const { return target_; }
  const std::string& http() const { return http_; }
  pid_t pid() const { return process_.pid(); }
  // SIGTERM, and waits for the process to end.
  void Stop() {
    process_.Signal(SIGTERM);
    process_.Wait();
  }

 private:
  drover::testing::TempDir dir_;
  drover::testing::ChildProcess process_;
  std::string target_;
  std::string http_;

  static std::vector<std::string> Args(const std::string& binary, const std::string& dir,
                                       const std::string& etcd_target, int watchers) {
    std::vector<std::string> args = {binary,
                                     "--log-level",
                                     "warn",
                                     "registry",
                                     "--http",
                                     "127.0.0.1:0",
                                     "--grpc",
                                     "127.0.0.1:0",
                                     "--max-watches-per-client",
                                     std::to_string(2 * watchers + 64),
                                     "--max-watches",
                                     std::to_string(std::max(10'000, 2 * watchers + 64)),
                                     "--max-connections",
                                     std::to_string(std::max(4'096, watchers + 256))};
    if (etcd_target.empty()) {
      args.insert(args.end(), {"--data-dir", dir});
    } else {
      args.insert(args.end(), {"--store", "etcd", "--etcd-endpoints", etcd_target});
    }
    return args;
  }

  static std::string Address(const std::string& line, const std::string& scheme) {
    auto at = line.find(scheme);
    if (at == std::string::npos) Fail("unexpected first line from drover registry: " + line);
    at += scheme.size();
    const auto end = line.find_first_of(" )", at);
    return line.substr(at, end == std::string::npos ? std::string::npos : end - at);
  }
};

// Watchers on the HTTP API (GET /v1/watch, chunked JSON lines), each its own connection, read by
// `threads` threads (one per CPU by default, as the gRPC watchers' client has a loop per CPU),
// each reading its share of the connections: through io_uring where the kernel allows it (a
// multishot receive per connection into buffers the ring provides: no system call per read and none
// to wait, so the watchers -- gateways on other machines in a fleet -- cost the registry's cores
// less), else through epoll and a recv() per ready connection.
class HttpWatchers {
 public:
  HttpWatchers(const std::string& address, int count, std::uint64_t from, std::uint64_t base,
               LatencyProbe& probe, bool uring, int threads)
      : base_(base), probe_(probe), conns_(static_cast<std::size_t>(count)), uring_(uring) {
    const std::string request = fmt::format(
        "GET /v1/watch?from={}&service=bench HTTP/1.1\r\nHost: {}\r\n\r\n", from, address);
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      c.fd = ConnectTo(address, "http watch");
      if (!drover::testing::SendAll(c.fd, request)) Fail("http watch: cannot send to " + address);
    }
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::size_t readers =
        std::clamp<std::size_t>(static_cast<std::size_t>(threads), 1, conns_.size());
    for (std::size_t r = 0; r < readers; ++r) {
      const std::size_t first = conns_.size() * r / readers;
      const std::size_t last = conns_.size() * (r + 1) / readers;
      threads_.emplace_back([this, first, last](std::stop_token stop) {
#ifdef DROVER_BENCH_URING
        if (uring_ && RunUring(stop, first, last)) return;
#endif
        Run(stop, first, last);
      });
    }
  }
  ~HttpWatchers() {
    Stop();
    for (Conn& c : conns_) ::close(c.fd);
  }
  int threads() const { return static_cast<int>(threads_.size()); }
  int ready() const { return ready_.load(); }
  // How the reader reads ("io_uring", "epoll"); known once ready() counts a stream.
  const char* reader() const { return reader_.load(); }
  // Call after the reader has stopped seeing new events (the probe has them all, or timed out).
  void Collect(LatencyProbe::Samples& samples) {
    Stop();
    for (Conn& c : conns_) probe_.Collect(c.arrivals, samples);
  }

 private:
  void Stop() {
    for (std::jthread& t : threads_) t.request_stop();
    threads_.clear();  // joined
  }

  struct Conn {
    int fd = -1;
    std::string rest;  // the start of a chunk a read cut off (rare: a chunk is one send)
    bool header_done = false;
    bool counted_ready = false;
    std::vector<Arrival> arrivals;
  };

  // A read per ready connection, parsed in place: these streams stand for gateways on other
  // machines, so what they cost on this one should be the kernel's share, not a parser's.
  void Run(std::stop_token stop, std::size_t first, std::size_t last) {
    const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
    for (std::size_t i = first; i < last; ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      ::epoll_ctl(epoll, EPOLL_CTL_ADD, conns_[i].fd, &ev);
    }
    std::vector<epoll_event> events(256);
    std::vector<char> buffer(65536);
    while (!stop.stop_requested()) {
      const int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), 100);
      for (int e = 0; e < n; ++e) {
        Conn& c = conns_[events[static_cast<std::size_t>(e)].data.u64];
        const ssize_t got = ::recv(c.fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
        if (got <= 0) {
          ::epoll_ctl(epoll, EPOLL_CTL_DEL, c.fd, nullptr);
          continue;
        }
        OnBytes(c, std::string_view(buffer.data(), static_cast<std::size_t>(got)));
      }
    }
    ::close(epoll);
  }

#ifdef DROVER_BENCH_URING
  // The io_uring reader; false (nothing read) when the kernel refuses the ring or its buffers.
  bool RunUring(std::stop_token stop, std::size_t first, std::size_t last) {
    constexpr unsigned kBuffers = 2048;  // a power of two, as the ring of buffers needs
    constexpr unsigned kBufferSize = 4096;
    constexpr int kGroup = 1;
    io_uring ring{};
    io_uring_params params{};
    // Completions are reaped only when this thread waits for them (it is the ring's one user).
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    if (int rc = io_uring_queue_init_params(kBuffers, &ring, &params); rc < 0) {
      std::fprintf(stderr, "registry_bench: HTTP watchers: no io_uring (%s), reading with epoll\n",
                   std::strerror(-rc));
      return false;
    }
    // The ring of buffers the kernel takes from is page-aligned memory shared with it.
    const std::unique_ptr<void, decltype(&std::free)> ring_memory(
        ::aligned_alloc(4096, kBuffers * sizeof(io_uring_buf)), &std::free);
    if (!ring_memory) Fail("http watch: out of memory");
    std::vector<char> storage(static_cast<std::size_t>(kBuffers) * kBufferSize);
    auto* buffers = static_cast<io_uring_buf_ring*>(ring_memory.get());
    io_uring_buf_ring_init(buffers);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uint64_t>(buffers);
    reg.ring_entries = kBuffers;
    reg.bgid = kGroup;
    if (int rc = io_uring_register_buf_ring(&ring, &reg, 0); rc < 0) {
      std::fprintf(stderr,
                   "registry_bench: HTTP watchers: no io_uring buffer ring (%s), reading with "
                   "epoll\n",
                   std::strerror(-rc));
      io_uring_queue_exit(&ring);
      return false;
    }
    const auto give_back = [&](unsigned id, int offset) {
      io_uring_buf_ring_add(buffers, storage.data() + static_cast<std::size_t>(id) * kBufferSize,
                            kBufferSize, static_cast<unsigned short>(id),
                            io_uring_buf_ring_mask(kBuffers), offset);
    };
    for (unsigned id = 0; id < kBuffers; ++id) give_back(id, static_cast<int>(id));
    io_uring_buf_ring_advance(buffers, static_cast<int>(kBuffers));
    const auto arm = [&](std::size_t i) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) {  // the submission queue is full: hand it over, then there is room
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);
      }
      io_uring_prep_recv_multishot(sqe, conns_[i].fd, nullptr, 0, 0);
      sqe->flags |= IOSQE_BUFFER_SELECT;
      sqe->buf_group = kGroup;
      io_uring_sqe_set_data64(sqe, i);
    };
    for (std::size_t i = first; i < last; ++i) arm(i);
    reader_.store("io_uring");
    while (!stop.stop_requested()) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec wait{.tv_sec = 0, .tv_nsec = 100'000'000};
      const int rc = io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &wait, nullptr);
      if (rc < 0 && rc != -ETIME && rc != -EINTR) {
        Fail(std::string("http watch: io_uring wait failed: ") + std::strerror(-rc));
      }
      unsigned head = 0;
      unsigned seen = 0;
      int returned = 0;
      io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        const std::size_t i = io_uring_cqe_get_data64(cqe);
        if (cqe->flags & IORING_CQE_F_BUFFER) {
          const unsigned id = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
          if (cqe->res > 0) {
            OnBytes(conns_[i],
                    std::string_view(storage.data() + static_cast<std::size_t>(id) * kBufferSize,
                                     static_cast<std::size_t>(cqe->res)));
          }
          give_back(id, returned++);
        }
        // The receive stopped (its buffers ran out, or another reason that is not the end):
        // armed again. The end of the stream, or an error, ends this connection's reads.
        if (!(cqe->flags & IORING_CQE_F_MORE) && (cqe->res > 0 || cqe->res == -ENOBUFS)) arm(i);
      }
      io_uring_cq_advance(&ring, seen);
      if (returned > 0) io_uring_buf_ring_advance(buffers, returned);
    }
    io_uring_queue_exit(&ring);  // cancels the receives still armed
    return true;
  }
#endif

  // Bytes read from `c`: parsed, with what a read cut off kept for the next.
  void OnBytes(Conn& c, std::string_view in) {
    if (c.rest.empty()) {
      c.rest.assign(Parse(c, in));
    } else {
      c.rest.append(in);
      c.rest = std::string(Parse(c, c.rest));
    }
  }

  // Consumes the head, then complete chunks, each of whole JSON lines (one per event); returns
  // what is left of `in`.
  std::string_view Parse(Conn& c, std::string_view in) {
    if (!c.header_done) {
      const auto end = in.find("\r\n\r\n");
      if (end == std::string_view::npos) return in;
      in.remove_prefix(end + 4);
      c.header_done = true;
    }
    while (true) {
      const auto size_end = in.find("\r\n");
      if (size_end == std::string_view::npos) return in;
      std::size_t size = 0;
      const auto [end, ec] = std::from_chars(in.data(), in.data() + size_end, size, 16);
      if (ec != std::errc() || end != in.data() + size_end) Fail("http watch: bad chunk size");
      if (in.size() < size_end + 2 + size + 2) return in;
      OnLines(c, in.substr(size_end + 2, size));
      in.remove_prefix(size_end + 2 + size + 2);
    }
  }

  // What follows the first `what` in `text`; empty (a null view) when it is not there.
  static std::string_view After(std::string_view text, std::string_view what) {
    const void* at = ::memmem(text.data(), text.size(), what.data(), what.size());
    if (at == nullptr) return {};
    const auto from = static_cast<std::size_t>(static_cast<const char*>(at) - text.data());
    return text.substr(from + what.size());
  }

  void OnLines(Conn& c, std::string_view lines) {
    while (!lines.empty()) {
      const auto nl = lines.find('\n');
      const std::string_view line = lines.substr(0, nl);
      lines = nl == std::string_view::npos ? std::string_view() : lines.substr(nl + 1);
      if (After(line, R"("type":"PUT")").data() == nullptr) continue;
      const std::string_view digits = After(line, R"("revision":)");
      std::int64_t rev = 0;
      if (std::from_chars(digits.data(), digits.data() + digits.size(), rev).ec != std::errc()) {
        continue;
      }
      if (rev <= static_cast<std::int64_t>(base_)) {
        if (!c.counted_ready) ready_.fetch_add(1);
        c.counted_ready = true;
      } else {
        probe_.Received(rev - static_cast<std::int64_t>(base_), c.arrivals);
      }
    }
  }

  const std::uint64_t base_;
  LatencyProbe& probe_;
  std::vector<Conn> conns_;
  const bool uring_;
  std::atomic<int> ready_{0};
  std::atomic<const char*> reader_{"epoll"};
  std::vector<std::jthread> threads_;  // the readers
};

// What the bench's watch streams share: a call on the bench's client, and the arrivals it saw
// (read once it is closed).
class WatchStream : public grpc_load::Call {
 public:
  using Call::Call;
  std::vector<Arrival>& arrivals() { return samples_; }

 protected:
  std::vector<Arrival> samples_;  // the connection's thread until Close
};

// A gRPC Watch of the service "bench" from revision `from`; its events after `base` are the
// probe's samples, and the first at or before it says the stream is live.
class DroverWatch final : public WatchStream {
 public:
  DroverWatch(grpc_load::Connection& connection, std::uint64_t from, std::uint64_t base,
              LatencyProbe& probe, std::atomic<int>& ready)
      : WatchStream(connection), base_(base), probe_(probe), ready_(ready) {
    pb::WatchRequest request;
    request.set_service("bench");
    request.set_from_revision(from);
    Start(paths::kWatch, request.SerializeAsString(), true);
  }

  void OnMessage(std::string_view message) override {
    if (!event_.ParseFromArray(message.data(), static_cast<int>(message.size())) ||
        event_.type() != pb::Event::PUT) {
      return;
    }
    const auto rev = static_cast<std::int64_t>(event_.revision());
    const auto base = static_cast<std::int64_t>(base_);
    if (rev <= base) {
      if (!counted_ready_) ready_.fetch_add(1);  // the replayed event: the stream is live
      counted_ready_ = true;
    } else {
      probe_.Received(rev - base, samples_);
    }
  }

 private:
  pb::Event event_;  // reused: its fields keep their memory
  const std::uint64_t base_;
  LatencyProbe& probe_;
  std::atomic<int>& ready_;
  bool counted_ready_ = false;
};

pb::RegisterRequest Registration(std::uint64_t i) {
  pb::RegisterRequest req;
  req.set_service("bench");
  req.set_id(InstanceId(i));
  pb::InstanceSpec* spec = req.mutable_spec();
  spec->set_address(fmt::format("10.{}.{}.{}:7000", i / 62'500, i / 250 % 250, i % 250));
  spec->set_generation(1);
  spec->set_state(pb::READY);
  spec->set_ttl_ms(600'000);  // nothing expires during the run
  spec->set_zone("zone-a");
  spec->set_version("1.0.0");
  (*spec->mutable_labels())["shard"] = std::to_string(i % 64);
  return req;
}

// Registration(i) over HTTP, as a client without the SDK sends it: PUT
// /v1/services/bench-http/instances/inst-NNNNN (a service of its own, so the gRPC phase's
// instances stay as they are).
std::string HttpRegistration(const std::string& host, std::uint64_t i) {
  const std::string body = fmt::format(
      R"({{"address":"10.{}.{}.{}:7000","generation":1,"state":"READY","ttl_ms":600000,)"
      R"("zone":"zone-a","version":"1.0.0","labels":{{"shard":"{}"}}}})",
      i / 62'500, i / 250 % 250, i % 250, i % 64);
  return fmt::format(
      "PUT /v1/services/bench-http/instances/{} HTTP/1.1\r\nHost: {}\r\n"
      "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
      InstanceId(i), host, body.size(), body);
}

// A process's resident memory, in bytes (VmRSS).
double RssBytes(pid_t pid) {
  return static_cast<double>(drover::procfs::StatusField(pid, "VmRSS").value_or(0)) * 1024;
}

// "R MB (anon A, file F)": a process's resident memory and what it is made of (heap and stacks;
// mapped files and the binary).
std::string RssParts(pid_t pid) {
  const auto mb = [pid](const char* field) {
    return static_cast<double>(drover::procfs::StatusField(pid, field).value_or(0)) / 1024;
  };
  return fmt::format("{:.1f} MB (anon {:.1f}, file {:.1f})", mb("VmRSS"), mb("RssAnon"),
                     mb("RssFile"));
}

// Waits up to 60 s until `ready()` -- the streams that have shown they are live -- reaches
// `count`; stops the bench with "<what> did not start" otherwise.
template <typename Ready>
void AwaitStreams(const Ready& ready, int count, const std::string& what) {
  const auto deadline = Clock::now() + 60s;
  while (ready() < count && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  if (ready() < count) Fail(what + " did not start");
}

// What one more of `watchers` idle streams costs process `pid` in RSS: half of them opened by
// `open(n)` (which returns what keeps its streams open), then the growth the other half brings,
// per stream -- free of what the first ones paid once (connections, allocator arenas). 0 when
// there is no second half to measure.
template <typename Open>
double MarginalStreamBytes(pid_t pid, int watchers, Open&& open) {
  const int first = watchers / 2;
  const int second = watchers - first;
  if (first < 1) return 0;
  [[maybe_unused]] auto held_first = open(first);  // open until both are measured
  const double half = RssBytes(pid);
  [[maybe_unused]] auto held_second = open(second);
  return (RssBytes(pid) - half) / static_cast<double>(second);
}

// One counter from the registry's /metrics (0 when absent).
double Metric(const std::string& http, const std::string& name) {
  const auto colon = http.rfind(':');
  const auto port = static_cast<std::uint16_t>(std::stoi(http.substr(colon + 1)));
  const auto reply = drover::testing::Http(port, "GET", "/metrics");
  const auto at = reply.body.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::stod(reply.body.substr(at + name.size() + 2));
}

// Registers instances first..first+n-1 through `load` (client c on its connection c) in the
// bench's closed loop of --clients.
ClosedLoop::Result RegisterMany(const Options& opt, grpc_load::Client& load, std::uint64_t n,
                                std::uint64_t first = 0) {
  return ClosedLoop::Count(opt.clients, n, [&load, first](int c, std::uint64_t seq, auto done) {
    grpc_load::Unary(load.For(c), paths::kRegister, Registration(first + seq).SerializeAsString(),
                     std::move(done));
  });
}

// Seconds from `start` until `complete()` holds (polled); fails the run after two minutes.
double SecondsUntil(Clock::time_point start, const std::function<bool()>& complete,
                    const std::string& what) {
  while (!complete()) {
    if (Clock::now() - start > 120s) Fail(what);
    std::this_thread::sleep_for(5ms);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The SQLite registry with --restart-instances stored, restarted: how long until a list holds
// them all, and what they cost in memory then.
void DroverRestart(const Options& opt, SystemFigures& out) {
  if (opt.restart_instances <= 0) return;
  const auto n = static_cast<std::uint64_t>(opt.restart_instances);
  drover::testing::TempDir dir;
  double empty_rss = 0;
  std::string empty_parts;
  {
    DroverServer first(opt.drover, "", 0, dir.path());
    empty_rss = RssBytes(first.pid());
    empty_parts = RssParts(first.pid());
    {
      grpc_load::Client load(first.target(), opt.connections);
      if (RegisterMany(opt, load, n).errors != 0) {
        Fail("drover: registrations for the restart failed");
      }
    }
    const auto stopping = Clock::now();
    first.Stop();
    std::fprintf(stderr, "registry_bench: drover with %llu instances stopped in %.2f s\n",
                 static_cast<unsigned long long>(n),
                 std::chrono::duration<double>(Clock::now() - stopping).count());
  }
  const auto start = Clock::now();
  DroverServer again(opt.drover, "", 0, dir.path());
  auto stub = pb::Registry::NewStub(FreshChannel(again.target()));
  double list_s = 0;  // the last List call's own time
  out.restart_s = SecondsUntil(
      start,
      [&] {
        pb::ListRequest req;
        req.set_service("bench");
        pb::ListReply list;
        grpc::ClientContext ctx;
        const auto asked = Clock::now();
        const bool ok = stub->List(&ctx, req, &list).ok();
        list_s = std::chrono::duration<double>(Clock::now() - asked).count();
        return ok && static_cast<std::uint64_t>(list.instances_size()) == n;
      },
      "drover: the restarted registry never listed them all");
  out.restart_rss_per_instance_b = (RssBytes(again.pid()) - empty_rss) / static_cast<double>(n);
  std::fprintf(stderr,
               "registry_bench: RSS empty %s, restarted with %llu instances %s; restart %.2f s, "
               "of which the complete List %.2f s\n",
               empty_parts.c_str(), static_cast<unsigned long long>(n),
               RssParts(again.pid()).c_str(), out.restart_s, list_s);
}

SystemFigures BenchDrover(const Options& opt, const std::string& etcd_target) {
  DroverServer server(opt.drover, etcd_target, opt.watchers);
  auto setup = pb::Registry::NewStub(Connect(server.target()));  // gRPC C++: setup, checks
  grpc_load::Client load(server.target(), opt.connections);
  SystemFigures out;

  // Registrations: what the phases below need, and the memory and group commits they cost (their
  // rates are measured apart, RegisterInRounds).
  const auto instances = static_cast<std::uint64_t>(opt.instances);
  const double rss_before = RssBytes(server.pid());
  const double commits_before = Metric(server.http(), "drover_registry_store_commits_total");
  const double writes_before = Metric(server.http(), "drover_registry_committed_writes_total");
  out.errors += RegisterMany(opt, load, instances).errors;
  out.store_commits = Metric(server.http(), "drover_registry_store_commits_total") - commits_before;
  out.committed_writes =
      Metric(server.http(), "drover_registry_committed_writes_total") - writes_before;
  out.rss_per_instance_b = (RssBytes(server.pid()) - rss_before) / static_cast<double>(instances);

  // Heartbeats: unary calls, then KeepAlive streams with one and with --batch per message.
  const auto measure =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.seconds));
  auto hb = ClosedLoop::For(opt.clients, 500ms, measure, [&](int c, std::uint64_t seq, auto done) {
    pb::HeartbeatRequest request;
    request.set_service("bench");
    request.set_id(InstanceId(seq % instances));
    request.set_generation(1);
    grpc_load::Unary(load.For(c), paths::kHeartbeat, request.SerializeAsString(), std::move(done));
  });
  out.unary_heartbeats_per_s = hb.per_second;
  out.errors += hb.errors;
  auto keepalive = [&](int batch) {
    std::vector<std::unique_ptr<PingPong>> streams;
    for (int c = 0; c < opt.clients; ++c) {
      pb::KeepAliveRequest req;
      for (int b = 0; b < batch; ++b) {
        pb::HeartbeatRequest* h = req.add_heartbeats();
        h->set_service("bench");
        h->set_id(InstanceId(static_cast<std::uint64_t>(c * batch + b) % instances));
        h->set_generation(1);
      }
      streams.push_back(std::make_unique<PingPong>(
          load.For(c), paths::kKeepAlive, req.SerializeAsString(), [](std::string_view reply) {
            return Parsed<pb::KeepAliveReply>(reply, [](const pb::KeepAliveReply& r) {
              return std::all_of(r.results().begin(), r.results().end(),
                                 [](const pb::HeartbeatResult& h) { return h.code() == 0; });
            });
          }));
    }
    auto result = StreamLoop(opt, streams);
    out.errors += result.errors;
    return result.per_second * batch;
  };
  out.keepalive_per_s = keepalive(1);
  out.batched_heartbeats_per_s = keepalive(opt.batch);
  // On etcd the registry shares accepted heartbeats in a batch every 100 ms, which takes an etcd
  // revision of its own: let the last one land, then make one registry write, so the revision
  // listed below is etcd's too and the measured writes get consecutive revisions.
  if (!etcd_target.empty()) {
    std::this_thread::sleep_for(1s);
    pb::SetStateRequest req;
    req.set_service("bench");
    req.set_id(InstanceId(0));
    req.set_generation(1);
    req.set_accepting(false);
    pb::RevisionReply reply;
    grpc::ClientContext ctx;
    if (!setup->SetState(&ctx, req, &reply).ok()) Fail("drover: SetState failed");
  }

  // Watch latency: every watcher resumes from one revision back, so the replayed event proves
  // its stream is live before the writes start.
  pb::ListRequest list_req;
  list_req.set_service("bench");
  pb::ListReply list;
  {
    grpc::ClientContext ctx;
    if (!setup->List(&ctx, list_req, &list).ok()) Fail("drover: List failed");
  }
  const std::uint64_t base = list.revision();
  grpc_load::Client watch_load(server.target(), opt.watch_connections);
  LatencyProbe probe(opt.writes, opt.watchers, opt.warmup);
  std::atomic<int> ready{0};
  const double rss_before_watches = RssBytes(server.pid());
  std::vector<std::unique_ptr<DroverWatch>> watches;
  for (int w = 0; w < opt.watchers; ++w) {
    watches.push_back(
        std::make_unique<DroverWatch>(watch_load.For(w), base - 1, base, probe, ready));
  }
  AwaitStreams([&] { return ready.load(); }, opt.watchers, "drover: watchers");
  std::this_thread::sleep_for(200ms);  // the replayed event written: every stream idle
  out.rss_per_watcher_b =
      (RssBytes(server.pid()) - rss_before_watches) / static_cast<double>(opt.watchers);
  RemoteWrites(opt, "drover", server.target(), static_cast<std::int64_t>(base), probe);
  probe.WaitAll(30s);
  LatencyProbe::Samples all;
  for (auto& w : watches) {
    w->Close();
    probe.Collect(w->arrivals(), all);
  }
  out.watch = Summarise(std::move(all), probe.expected());

  // The same over the HTTP API, which the gateways and the SDK use.
  LatencyProbe http_probe(opt.writes, opt.watchers, opt.warmup);
  const std::uint64_t http_base = base + static_cast<std::uint64_t>(probe.total_writes());
  HttpWatchers http_watchers(server.http(), opt.watchers, http_base - 1, http_base, http_probe,
                             opt.http_watch_reader == "io_uring", opt.http_watch_threads);
  AwaitStreams([&] { return http_watchers.ready(); }, opt.watchers, "drover: HTTP watchers");
  out.http_watch_reader = http_watchers.reader();
  out.http_watch_threads = http_watchers.threads();
  RemoteWrites(opt, "drover", server.target(), static_cast<std::int64_t>(http_base), http_probe);
  http_probe.WaitAll(30s);
  LatencyProbe::Samples http_all;
  http_watchers.Collect(http_all);
  out.http_watch = Summarise(std::move(http_all), http_probe.expected());
  return out;
}

// Resident memory per idle watch stream, gRPC and HTTP, each as MarginalStreamBytes measures it in
// a fresh registry on SQLite (so no stream reuses memory the run gave back to the allocator).
// Each stream is opened from one revision back; the replayed event says it is live.
void DroverIdleWatchers(const Options& opt, SystemFigures& out) {
  LatencyProbe unused(1, opt.idle_watchers, 0);
  // `open(server, revision, count)` opens `count` more streams and returns what keeps them.
  const auto measure = [&](auto&& open) {
    DroverServer server(opt.drover, "", opt.idle_watchers);
    auto stub = pb::Registry::NewStub(Connect(server.target()));
    std::uint64_t revision = 0;
    for (std::uint64_t i = 0; i < 2; ++i) {
      grpc::ClientContext ctx;
      pb::RevisionReply reply;
      if (!stub->Register(&ctx, Registration(i), &reply).ok()) Fail("drover: Register failed");
      revision = reply.revision();
    }
    return MarginalStreamBytes(server.pid(), opt.idle_watchers, [&](int count) {
      auto held = open(server, revision, count);
      std::this_thread::sleep_for(200ms);  // the replayed event written: every stream idle
      return held;
    });
  };
  out.idle_http_watch_b = measure([&](DroverServer& server, std::uint64_t revision, int count) {
    auto watchers =
        std::make_unique<HttpWatchers>(server.http(), count, revision - 1, revision, unused,
                                       /*uring=*/false, /*threads=*/1);
    AwaitStreams([&] { return watchers->ready(); }, count, "drover: idle HTTP watchers");
    return watchers;
  });
  struct GrpcWatches {
    std::atomic<int> ready{0};
    std::vector<std::unique_ptr<DroverWatch>> watches;
    ~GrpcWatches() {
      for (auto& w : watches) w->Close();
    }
  };
  // One set of connections for both halves (as for etcd): the second half adds streams only.
  std::unique_ptr<grpc_load::Client> load;
  out.idle_grpc_watch_b = measure([&](DroverServer& server, std::uint64_t revision, int count) {
    if (!load) {
      load = std::make_unique<grpc_load::Client>(server.target(),
                                                 std::max(1, opt.watch_connections / 2));
    }
    auto held = std::make_unique<GrpcWatches>();
    for (int w = 0; w < count; ++w) {
      held->watches.push_back(
          std::make_unique<DroverWatch>(load->For(static_cast<int>(held->watches.size())),
                                        revision - 1, revision, unused, held->ready));
    }
    AwaitStreams([&] { return held->ready.load(); }, count, "drover: idle gRPC watchers");
    return held;
  });
}

// ---------------------------------------------------------------------------------------------
// etcd

class EtcdServer {
 public:
  explicit EtcdServer(const std::string& binary) : binary_(binary) {
    client_url_ = fmt::format("http://127.0.0.1:{}", FreePort());
    peer_url_ = fmt::format("http://127.0.0.1:{}", FreePort());
    target_ = client_url_.substr(std::string("http://").size());
    Start();
  }
  const std::string& target() const { return target_; }
  pid_t pid() const { return process_->pid(); }
  // SIGTERM, and wait until the process has exited.
  void Stop() {
    process_->Signal(SIGTERM);
    process_->Wait();
  }
  // Starts (again, after Stop: on the same data directory and ports) and returns once etcd serves.
  void Start() {
    process_ = std::make_unique<drover::testing::ChildProcess>(std::vector<std::string>{
        binary_, "--name", "bench", "--data-dir", dir_.path() + "/etcd", "--listen-client-urls",
        client_url_, "--advertise-client-urls", client_url_, "--listen-peer-urls", peer_url_,
        "--initial-advertise-peer-urls", peer_url_, "--initial-cluster", "bench=" + peer_url_,
        "--logger", "zap", "--log-level", "error"});
    // Ready once a linearizable read succeeds (the single member has elected itself). Each try
    // on a connection of its own: etcd accepts connections a while before it serves them, and a
    // channel whose handshake began then waited about 10 s before it tried again (measured:
    // every start took 10.0 s that way, with etcd serving after 1).
    const auto deadline = Clock::now() + 30s;
    std::string last;
    while (Clock::now() < deadline) {
      auto kv = etcd::KV::NewStub(FreshChannel(target_));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 200ms);
      ctx.set_wait_for_ready(true);
      etcd::RangeRequest req;
      req.set_key("ready");
      etcd::RangeResponse resp;
      const grpc::Status status = kv->Range(&ctx, req, &resp);
      if (status.ok()) return;
      last = status.error_message();
      if (!process_->running()) break;
      std::this_thread::sleep_for(10ms);
    }
    Fail("etcd did not start on " + target_ + ": " + last);
  }

 private:
  drover::testing::TempDir dir_;
  const std::string binary_;
  std::string client_url_, peer_url_, target_;
  std::unique_ptr<drover::testing::ChildProcess> process_;
};

std::string EtcdKey(std::uint64_t i) { return "/drover/bench/" + InstanceId(i); }

// What Drover stores for an instance, at about the same size.
std::string EtcdValue(std::uint64_t i, bool accepting) {
  return fmt::format(
      R"({{"address":"10.0.{}.{}:7000","generation":1,"state":"READY","ttl_ms":600000,)"
      R"("weight":1,"zone":"zone-a","labels":{{"shard":"{}"}},"version":"1.0.0","accepting":{}}})",
      i / 250, i % 250, i % 64, accepting ? "true" : "false");
}

std::string Base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < in.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, in.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k)
      v = v << 8 | (k < n ? static_cast<unsigned char>(in[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// A new key put through etcd's JSON gateway (POST /v3/kv/put, key and value in base64): what an
// HTTP client of etcd sends, as HttpRegistration is for Drover.
std::string EtcdHttpPut(const std::string& host, std::uint64_t i) {
  const std::string body =
      fmt::format(R"({{"key":"{}","value":"{}"}})", Base64("/drover/bench-http/" + InstanceId(i)),
                  Base64(EtcdValue(i, true)));
  return fmt::format(
      "POST /v3/kv/put HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\n\r\n{}",
      host, body.size(), body);
}

// An etcd Watch stream of every key under /drover/bench/ after revision `base`; the created
// answer says the stream is live.
class EtcdWatch final : public WatchStream {
 public:
  EtcdWatch(grpc_load::Connection& connection, std::int64_t base, LatencyProbe& probe,
            std::atomic<int>& ready)
      : WatchStream(connection), base_(base), probe_(probe), ready_(ready) {
    etcd::WatchRequest request;
    etcd::WatchCreateRequest* create = request.mutable_create_request();
    create->set_key("/drover/bench/");
    create->set_range_end("/drover/bench0");  // '/' + 1: every key under the prefix
    create->set_start_revision(base + 1);
    Start(paths::kEtcdWatch, request.SerializeAsString(), false);
  }

  void OnMessage(std::string_view message) override {
    if (!response_.ParseFromArray(message.data(), static_cast<int>(message.size()))) return;
    if (response_.created()) ready_.fetch_add(1);
    for (const auto& e : response_.events()) {
      probe_.Received(e.kv().mod_revision() - base_, samples_);
    }
  }

 private:
  etcd::WatchResponse response_;  // reused: its fields keep their memory
  const std::int64_t base_;
  LatencyProbe& probe_;
  std::atomic<int>& ready_;
};

// Puts of keys first + seq % keys through `load` (client c on its connection c), for ClosedLoop.
ClosedLoop::Issue EtcdPuts(grpc_load::Client& load, std::uint64_t keys, bool accepting,
                           std::uint64_t first = 0) {
  return [&load, keys, accepting, first](int c, std::uint64_t seq, auto done) {
    etcd::PutRequest request;
    request.set_key(EtcdKey(first + seq % keys));
    request.set_value(EtcdValue(first + seq % keys, accepting));
    grpc_load::Unary(load.For(c), paths::kEtcdPut, request.SerializeAsString(), std::move(done));
  };
}

// etcd with --restart-instances keys, restarted: how long until a count holds them all, and
// its memory then per key.
void EtcdRestart(const Options& opt, SystemFigures& out) {
  if (opt.restart_instances <= 0) return;
  const auto n = static_cast<std::uint64_t>(opt.restart_instances);
  EtcdServer server(opt.etcd);
  const double empty_rss = RssBytes(server.pid());
  {
    grpc_load::Client load(server.target(), opt.connections);
    if (ClosedLoop::Count(opt.clients, n, EtcdPuts(load, n, true)).errors != 0) {
      Fail("etcd: puts for the restart failed");
    }
  }
  // Timed from the stopped process, as Drover's restart is.
  const auto stopping = Clock::now();
  server.Stop();
  std::fprintf(stderr, "registry_bench: etcd with %llu keys stopped in %.2f s\n",
               static_cast<unsigned long long>(n),
               std::chrono::duration<double>(Clock::now() - stopping).count());
  const auto start = Clock::now();
  server.Start();
  auto kv = etcd::KV::NewStub(FreshChannel(server.target()));
  double list_s = 0;  // the last Range call's own time
  out.restart_s = SecondsUntil(
      start,
      [&] {
        // The whole list, keys and values, as Drover's List returns every instance.
        etcd::RangeRequest req;
        req.set_key("/drover/bench/");
        req.set_range_end("/drover/bench0");
        etcd::RangeResponse resp;
        grpc::ClientContext ctx;
        const auto asked = Clock::now();
        const bool ok = kv->Range(&ctx, req, &resp).ok();
        list_s = std::chrono::duration<double>(Clock::now() - asked).count();
        return ok && static_cast<std::uint64_t>(resp.kvs_size()) == n;
      },
      "etcd: the restarted etcd never listed them all");
  out.restart_rss_per_instance_b = (RssBytes(server.pid()) - empty_rss) / static_cast<double>(n);
  std::fprintf(stderr,
               "registry_bench: etcd restarted with %llu keys in %.2f s, of which the "
               "complete Range %.2f s\n",
               static_cast<unsigned long long>(n), out.restart_s, list_s);
}

// etcd's cost per idle watch stream, as MarginalStreamBytes measures Drover's: in a fresh etcd.
void EtcdIdleWatchers(const Options& opt, SystemFigures& out) {
  EtcdServer server(opt.etcd);
  grpc_load::Client load(server.target(), std::max(1, opt.watch_connections / 2));
  LatencyProbe unused(1, opt.idle_watchers, 0);
  std::atomic<int> ready{0};
  std::vector<std::unique_ptr<EtcdWatch>> watches;
  out.idle_grpc_watch_b = MarginalStreamBytes(server.pid(), opt.idle_watchers, [&](int count) {
    for (int w = 0; w < count; ++w) {
      watches.push_back(std::make_unique<EtcdWatch>(load.For(static_cast<int>(watches.size())), 0,
                                                    unused, ready));
    }
    const int open = static_cast<int>(watches.size());
    AwaitStreams([&] { return ready.load(); }, open, "etcd: idle watchers");
    std::this_thread::sleep_for(200ms);
    return open;  // `watches` keeps them
  });
  for (auto& w : watches) w->Close();
}

SystemFigures BenchEtcd(const Options& opt) {
  EtcdServer server(opt.etcd);
  auto setup = Connect(server.target());  // gRPC C++: setup and checks
  auto kv = etcd::KV::NewStub(setup);
  auto lease = etcd::Lease::NewStub(setup);
  grpc_load::Client load(server.target(), opt.connections);
  const auto instances = static_cast<std::uint64_t>(opt.instances);
  const auto measure =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.seconds));
  SystemFigures out;

  // As for Drover: the keys the phases below need, and their memory (rates: RegisterInRounds).
  const double rss_before = RssBytes(server.pid());
  out.errors += ClosedLoop::Count(opt.clients, instances, EtcdPuts(load, instances, true)).errors;
  out.rss_per_instance_b = (RssBytes(server.pid()) - rss_before) / static_cast<double>(instances);
  auto puts = ClosedLoop::For(opt.clients, 500ms, measure, EtcdPuts(load, instances, false));
  out.puts_per_s = puts.per_second;
  out.errors += puts.errors;

  // Keepalives: one lease and one stream per client, as an etcd client keeps its session.
  std::vector<std::unique_ptr<PingPong>> streams;
  for (int c = 0; c < opt.clients; ++c) {
    grpc::ClientContext ctx;
    etcd::LeaseGrantRequest grant;
    grant.set_ttl(600);
    etcd::LeaseGrantResponse granted;
    if (!lease->LeaseGrant(&ctx, grant, &granted).ok()) Fail("etcd: LeaseGrant failed");
    etcd::LeaseKeepAliveRequest req;
    req.set_id(granted.id());
    streams.push_back(std::make_unique<PingPong>(
        load.For(c), paths::kEtcdKeepAlive, req.SerializeAsString(), [](std::string_view reply) {
          return Parsed<etcd::LeaseKeepAliveResponse>(
              reply, [](const etcd::LeaseKeepAliveResponse& r) { return r.ttl() > 0; });
        }));
  }
  auto ka = StreamLoop(opt, streams);
  out.keepalive_per_s = ka.per_second;
  out.errors += ka.errors;

  // Watch latency.
  etcd::RangeRequest head;
  head.set_key("/drover/bench/");
  head.set_range_end("/drover/bench0");
  head.set_count_only(true);
  etcd::RangeResponse head_reply;
  {
    grpc::ClientContext ctx;
    if (!kv->Range(&ctx, head, &head_reply).ok()) Fail("etcd: Range failed");
  }
  const std::int64_t base = head_reply.header().revision();
  grpc_load::Client watch_load(server.target(), opt.watch_connections);
  LatencyProbe probe(opt.writes, opt.watchers, opt.warmup);
  std::atomic<int> ready{0};
  const double rss_before_watches = RssBytes(server.pid());
  std::vector<std::unique_ptr<EtcdWatch>> watches;
  for (int w = 0; w < opt.watchers; ++w) {
    watches.push_back(std::make_unique<EtcdWatch>(watch_load.For(w), base, probe, ready));
  }
  AwaitStreams([&] { return ready.load(); }, opt.watchers, "etcd: watchers");
  std::this_thread::sleep_for(200ms);
  out.rss_per_watcher_b =
      (RssBytes(server.pid()) - rss_before_watches) / static_cast<double>(opt.watchers);
  RemoteWrites(opt, "etcd", server.target(), base, probe);
  probe.WaitAll(30s);
  LatencyProbe::Samples all;
  for (auto& w : watches) {
    w->Close();
    probe.Collect(w->arrivals(), all);
  }
  out.watch = Summarise(std::move(all), probe.expected());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Registrations in rounds that take turns between the systems

// Registrations/s of every system measured side by side: servers of each system started at once
// (idle while another is measured), then --rounds rounds in which each system in turn registers
// --instances new instances (etcd: puts new keys) -- each round led by the next system -- first
// over gRPC, then over HTTP. A system's figure is the median of its rounds. Measured one system
// after another, minutes apart, a slow spell of the machine met one and not the other (the same
// registry ran 55k and 38k/s minutes apart here); in turns, a spell meets them alike.
struct RegistrationRounds {
  std::vector<double> grpc, http;  // per round, registrations (puts) per second
  std::uint64_t errors = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Which systems: drover/sqlite, drover/etcd, etcd (in that order in the result; absent: empty).
std::vector<std::optional<RegistrationRounds>> RegisterInRounds(const Options& opt,
                                                                const std::string& etcd_binary,
                                                                bool sqlite, bool on_etcd) {
  // One registrar per system: register `n` new instances (keys) from number `first`.
  struct System {
    std::function<ClosedLoop::Result(std::uint64_t first, std::uint64_t n)> grpc, http;
  };
  std::vector<std::optional<System>> systems(3);
  const auto drover = [&](DroverServer& server, grpc_load::Client& load) {
    System s;
    s.grpc = [&opt, &load](std::uint64_t first, std::uint64_t n) {
      return RegisterMany(opt, load, n, first);
    };
    s.http = [&opt, &server](std::uint64_t first, std::uint64_t n) {
      return HttpLoop::Count(server.http(), opt.clients, n, [&server, first](std::uint64_t seq) {
        return HttpRegistration(server.http(), first + seq);
      });
    };
    return s;
  };
  std::unique_ptr<DroverServer> on_sqlite, on_store;
  std::unique_ptr<EtcdServer> store, etcd;
  std::unique_ptr<grpc_load::Client> sqlite_load, store_load, etcd_load;
  if (sqlite) {
    on_sqlite = std::make_unique<DroverServer>(opt.drover, "", 0);
    sqlite_load = std::make_unique<grpc_load::Client>(on_sqlite->target(), opt.connections);
    systems[0] = drover(*on_sqlite, *sqlite_load);
  }
  if (on_etcd) {
    store = std::make_unique<EtcdServer>(etcd_binary);
    on_store = std::make_unique<DroverServer>(opt.drover, store->target(), 0);
    store_load = std::make_unique<grpc_load::Client>(on_store->target(), opt.connections);
    systems[1] = drover(*on_store, *store_load);
  }
  if (!etcd_binary.empty()) {
    etcd = std::make_unique<EtcdServer>(etcd_binary);
    etcd_load = std::make_unique<grpc_load::Client>(etcd->target(), opt.connections);
    System s;
    s.grpc = [&opt, &etcd_load](std::uint64_t first, std::uint64_t n) {
      return ClosedLoop::Count(opt.clients, n, EtcdPuts(*etcd_load, n, true, first));
    };
    s.http = [&opt, &etcd](std::uint64_t first, std::uint64_t n) {
      return HttpLoop::Count(etcd->target(), opt.clients, n, [&etcd, first](std::uint64_t seq) {
        return EtcdHttpPut(etcd->target(), first + seq);
      });
    };
    systems[2] = std::move(s);
  }
  std::vector<std::optional<RegistrationRounds>> out(systems.size());
  for (std::size_t i = 0; i < systems.size(); ++i) {
    if (systems[i]) out[i].emplace();
  }
  const auto n = static_cast<std::uint64_t>(opt.instances);
  for (const bool over_http : {false, true}) {
    for (int round = 0; round < opt.rounds; ++round) {
      for (std::size_t k = 0; k < systems.size(); ++k) {
        const std::size_t i = (k + static_cast<std::size_t>(round)) % systems.size();
        if (!systems[i]) continue;
        const std::uint64_t first = static_cast<std::uint64_t>(round) * n;
        const ClosedLoop::Result r =
            over_http ? systems[i]->http(first, n) : systems[i]->grpc(first, n);
        (over_http ? out[i]->http : out[i]->grpc).push_back(r.per_second);
        out[i]->errors += r.errors;
      }
    }
  }
  // The clients close before their servers stop.
  sqlite_load.reset();
  store_load.reset();
  etcd_load.reset();
  return out;
}

// ---------------------------------------------------------------------------------------------

// The writer process: flips `accepting` of one instance per write (each write changes
// something, so each is one revision) and checks that nothing else wrote in between.
int DroverWriter(const Options& opt, const std::string& target, std::uint64_t base) {
  auto stub = pb::Registry::NewStub(Connect(target));
  const auto instances = static_cast<std::uint64_t>(opt.instances);
  std::vector<bool> accepting(instances, true);
  {
    pb::ListRequest req;
    req.set_service("bench");
    pb::ListReply list;
    grpc::ClientContext ctx;
    if (!stub->List(&ctx, req, &list).ok()) Fail("drover: List failed");
    for (const pb::Instance& in : list.instances()) {
      const auto i = std::stoull(in.id().substr(in.id().find('-') + 1));
      if (i < instances) accepting[i] = in.spec().accepting();
    }
  }
  PacedWrites(opt.writes, std::chrono::milliseconds(opt.interval_ms), [&](int k) {
    const std::uint64_t i = static_cast<std::uint64_t>(k) % instances;
    accepting[i] = !accepting[i];
    pb::SetStateRequest req;
    req.set_service("bench");
    req.set_id(InstanceId(i));
    req.set_generation(1);
    req.set_accepting(accepting[i]);
    pb::RevisionReply reply;
    grpc::ClientContext ctx;
    grpc::Status s = stub->SetState(&ctx, req, &reply);
    if (!s.ok()) Fail("drover: SetState failed: " + s.error_message());
    if (reply.revision() != base + static_cast<std::uint64_t>(k)) {
      Fail(fmt::format("drover: write {} got revision {}, expected {}: a concurrent writer?", k,
                       reply.revision(), base + static_cast<std::uint64_t>(k)));
    }
  });
  return 0;
}

int EtcdWriter(const Options& opt, const std::string& target, std::int64_t base) {
  auto kv = etcd::KV::NewStub(Connect(target));
  const auto instances = static_cast<std::uint64_t>(opt.instances);
  std::vector<bool> accepting(instances, true);
  PacedWrites(opt.writes, std::chrono::milliseconds(opt.interval_ms), [&](int k) {
    const std::uint64_t i = static_cast<std::uint64_t>(k) % instances;
    accepting[i] = !accepting[i];
    etcd::PutRequest req;
    req.set_key(EtcdKey(i));
    req.set_value(EtcdValue(i, accepting[i]));
    etcd::PutResponse reply;
    grpc::ClientContext ctx;
    grpc::Status s = kv->Put(&ctx, req, &reply);
    if (!s.ok()) Fail("etcd: Put failed: " + s.error_message());
    if (reply.header().revision() != base + k) Fail("etcd: unexpected revision");
  });
  return 0;
}

double Ratio(double ours, double theirs) { return theirs > 0 ? ours / theirs : 0; }

// `d`: Drover on SQLite (or on etcd when that is all that ran); `de`: Drover on etcd; `e`: etcd.
void PrintReport(const Options& opt, const std::optional<SystemFigures>& d,
                 const std::optional<SystemFigures>& de, const std::optional<SystemFigures>& e) {
  std::printf(
      "registry benchmark: %d clients over %d connections, %d instances, %d watchers, "
      "%d writes %d ms apart (after %d unmeasured); registrations: the median of %d rounds "
      "taking turns\n",
      opt.clients, opt.connections, opt.instances, opt.watchers, opt.writes, opt.interval_ms,
      opt.warmup, opt.rounds);
  std::printf("%-38s %14s %14s %14s %11s %11s\n", "", "drover/sqlite", "drover/etcd", "etcd",
              "sqlite/etcd", "d.etcd/etcd");
  // Rows of figures measured for drover/sqlite and etcd only (the fresh-server memory, the
  // restart) print "-" for a 0 -- not measured -- as for a system not run; the rest show a 0.
  bool zero_unmeasured = false;
  auto measured = [&](const std::optional<SystemFigures>& f, auto get) {
    return f && (!zero_unmeasured || get(*f) != 0);
  };
  auto cell = [&](const std::optional<SystemFigures>& f, auto get, const char* format) {
    return measured(f, get) ? fmt::format(fmt::runtime(format), get(*f)) : std::string("-");
  };
  auto row = [&](const std::string& name, auto get, auto get_etcd, const char* format) {
    // Only of two positive figures: an RSS that fell while streams opened (etcd's garbage
    // collector ran) has no ratio.
    const auto ratio = [&](const std::optional<SystemFigures>& ours) {
      return measured(ours, get) && measured(e, get_etcd) && get(*ours) > 0 && get_etcd(*e) > 0
                 ? fmt::format("{:.2f}x", Ratio(get(*ours), get_etcd(*e)))
                 : std::string("-");
    };
    std::printf("%-38s %14s %14s %14s %11s %11s\n", name.c_str(), cell(d, get, format).c_str(),
                cell(de, get, format).c_str(), cell(e, get_etcd, format).c_str(), ratio(d).c_str(),
                ratio(de).c_str());
  };
  const auto ka = [](const SystemFigures& f) { return f.keepalive_per_s; };
  row(
      "registrations/s (etcd: put new)",
      [](const SystemFigures& f) { return f.registrations_per_s; },
      [](const SystemFigures& f) { return f.registrations_per_s; }, "{:.0f}");
  row(
      "registrations/s, HTTP (etcd: JSON gateway)",
      [](const SystemFigures& f) { return f.http_registrations_per_s; },
      [](const SystemFigures& f) { return f.http_registrations_per_s; }, "{:.0f}");
  row(
      "heartbeats/s, unary Heartbeat",
      [](const SystemFigures& f) { return f.unary_heartbeats_per_s; }, ka, "{:.0f}");
  row("heartbeats/s, KeepAlive 1/message", ka, ka, "{:.0f}");
  row(
      fmt::format("heartbeats/s, KeepAlive {}/message", opt.batch),
      [](const SystemFigures& f) { return f.batched_heartbeats_per_s; }, ka, "{:.0f}");
  row(
      "KeepAlive 1/message vs etcd put/s", ka, [](const SystemFigures& f) { return f.puts_per_s; },
      "{:.0f}");
  // From the write's sending (it includes the commit: the goals' figure), then from its
  // acknowledgement (the commit is done: the fan-out alone, to within the writer's reply).
  using Pick = Latency WatchLatency::*;
  for (const auto& [since, pick] :
       {std::pair<const char*, Pick>{"", &WatchLatency::from_send},
        std::pair<const char*, Pick>{" after ack", &WatchLatency::from_ack}}) {
    const auto grpc = [pick](const SystemFigures& f) { return &(f.watch.*pick); };
    const auto http = [pick](const SystemFigures& f) { return &(f.http_watch.*pick); };
    for (const auto& [stat, of] :
         {std::pair<const char*, double Latency::*>{"p50", &Latency::p50_ms},
          std::pair<const char*, double Latency::*>{"p99", &Latency::p99_ms},
          std::pair<const char*, double Latency::*>{"max", &Latency::max_ms}}) {
      const auto g = [grpc, of](const SystemFigures& f) { return grpc(f)->*of; };
      const auto h = [http, of](const SystemFigures& f) { return http(f)->*of; };
      row(fmt::format("watch {} ms{}, gRPC Watch", stat, since), g, g, "{:.2f}");
      row(fmt::format("watch {} ms{}, HTTP /v1/watch", stat, since), h, g, "{:.2f}");
    }
  }
  const auto per_instance = [](const SystemFigures& f) { return f.rss_per_instance_b; };
  const auto per_watcher = [](const SystemFigures& f) { return f.rss_per_watcher_b; };
  row("RSS B per instance (etcd: per key)", per_instance, per_instance, "{:.0f}");
  row("RSS B per idle gRPC watch stream", per_watcher, per_watcher, "{:.0f}");
  const auto idle_grpc = [](const SystemFigures& f) { return f.idle_grpc_watch_b; };
  const auto idle_http = [](const SystemFigures& f) { return f.idle_http_watch_b; };
  zero_unmeasured = true;  // from here on
  const std::string of = fmt::format("  one more of {}, fresh server: ", opt.idle_watchers);
  row(of + "gRPC", idle_grpc, idle_grpc, "{:.0f}");
  row(of + "HTTP", idle_http, idle_grpc, "{:.0f}");
  if (opt.restart_instances > 0) {
    const auto restart = [](const SystemFigures& f) { return f.restart_s; };
    const auto loaded = [](const SystemFigures& f) { return f.restart_rss_per_instance_b; };
    row(fmt::format("restart to a full list, s ({})", opt.restart_instances), restart, restart,
        "{:.2f}");
    row(fmt::format("RSS B per instance after it ({})", opt.restart_instances), loaded, loaded,
        "{:.0f}");
  }
  auto got = [](const Latency& l) {
    return fmt::format("{}/{}", l.samples, l.samples + l.missing);
  };
  std::printf("watch events received:");
  if (d)
    std::printf(" drover/sqlite gRPC %s, HTTP %s;", got(d->watch.from_send).c_str(),
                got(d->http_watch.from_send).c_str());
  if (de)
    std::printf(" drover/etcd gRPC %s, HTTP %s;", got(de->watch.from_send).c_str(),
                got(de->http_watch.from_send).c_str());
  if (e) std::printf(" etcd %s", got(e->watch.from_send).c_str());
  if (d || de) {
    const SystemFigures& f = d ? *d : *de;
    std::printf("\nHTTP watchers read by %d thread%s through %s", f.http_watch_threads,
                f.http_watch_threads == 1 ? "" : "s", f.http_watch_reader.c_str());
  }
  std::printf("\nrequest errors:");
  if (d) std::printf(" drover/sqlite %llu", static_cast<unsigned long long>(d->errors));
  if (de) std::printf(" drover/etcd %llu", static_cast<unsigned long long>(de->errors));
  if (e) std::printf(" etcd %llu", static_cast<unsigned long long>(e->errors));
  std::printf(
      "\n(etcd column: heartbeats are LeaseKeepAlive, one lease per stream -- an etcd lease can "
      "cover many keys, as one KeepAlive message can cover many instances; watch is etcd's "
      "gRPC Watch. drover/etcd: the registry on an etcd store -- a write is an etcd Txn, "
      "answered once the registry's view holds it: at once when the view stood at the revision "
      "before it, else when the registry's etcd watch brought it back)\n");
  for (const auto* f : {&d, &de}) {
    if (!*f || (*f)->store_commits <= 0) continue;
    std::printf("group commit (%s): %.0f registrations in %.0f store commits, %.1f per commit\n",
                f == &d ? "drover/sqlite" : "drover/etcd", (*f)->committed_writes,
                (*f)->store_commits, (*f)->committed_writes / (*f)->store_commits);
  }
  // The goals, each figure judged on its own against etcd's matching one (rates: Drover / etcd
  // at least the goal; watch p99: at most 10 ms, etcd's beside it).
  const auto judge = [](bool met) { return met ? "met" : "NOT met"; };
  const auto rate_goal = [&](const char* what, const std::optional<SystemFigures>& x, double ours,
                             double theirs, double goal) {
    if (!x) return;
    if (!e) {
      std::printf("goal: %-56s >= %.1fx etcd: %.0f/s, etcd not measured -- NOT met\n", what, goal,
                  ours);
      return;
    }
    const double ratio = Ratio(ours, theirs);
    std::printf("goal: %-56s >= %.1fx etcd: %.0f/s vs %.0f/s = %.2fx -- %s\n", what, goal, ours,
                theirs, ratio, judge(ratio >= goal));
  };
  if (d) {
    rate_goal("registrations/s, drover/sqlite", d, d->registrations_per_s,
              e ? e->registrations_per_s : 0, 2.0);
  }
  if (d) {
    // Over HTTP, judged against etcd's own fastest put (gRPC; its JSON gateway is slower).
    rate_goal("registrations/s, HTTP, drover/sqlite (etcd: gRPC puts)", d,
              d->http_registrations_per_s, e ? e->registrations_per_s : 0, 2.0);
  }
  if (de) {
    rate_goal("registrations/s, drover/etcd", de, de->registrations_per_s,
              e ? e->registrations_per_s : 0, 0.7);
    rate_goal("registrations/s, HTTP, drover/etcd (etcd: gRPC puts)", de,
              de->http_registrations_per_s, e ? e->registrations_per_s : 0, 0.7);
  }
  if (d) {
    rate_goal("unary heartbeats/s, drover/sqlite (etcd: keepalives)", d, d->unary_heartbeats_per_s,
              e ? e->keepalive_per_s : 0, 2.0);
  }
  for (const auto* f : {&d, &de}) {
    if (!*f) continue;
    const SystemFigures& x = **f;
    const char* name = f == &d ? "drover/sqlite" : "drover/etcd";
    const std::string etcd_p99 = e ? fmt::format("{:.1f} ms", e->watch.from_send.p99_ms) : "-";
    for (const auto& [api, latency] :
         {std::pair{"gRPC", &x.watch.from_send}, std::pair{"HTTP", &x.http_watch.from_send}}) {
      const std::string what =
          fmt::format("watch p99, {} {}, {} watchers", name, api, opt.watchers);
      if (f == &d) {
        std::printf("goal: %-56s <= 10 ms: %.1f ms (etcd %s) -- %s\n", what.c_str(),
                    latency->p99_ms, etcd_p99.c_str(), judge(latency->p99_ms <= 10));
      } else {
        std::printf("      %-56s    %.1f ms (etcd %s; printed, not judged)\n", what.c_str(),
                    latency->p99_ms, etcd_p99.c_str());
      }
    }
  }
  if (d) {
    const auto bytes_goal = [&](const char* what, double ours, double theirs, double goal) {
      if (ours <= 0) {  // e.g. --watchers 1: no second half to measure
        std::printf("goal: %-56s <= %.0f B: not measured\n", what, goal);
        return;
      }
      std::printf("goal: %-56s <= %.0f B: %.0f B (etcd %s) -- %s\n", what, goal, ours,
                  e ? fmt::format("{:.0f} B", theirs).c_str() : "-", judge(ours <= goal));
    };
    if (opt.restart_instances > 0) {
      const bool met = d->restart_s <= 2.0;
      std::printf(
          "goal: %-56s <= 2 s: %.2f s (etcd %s) -- %s\n",
          fmt::format("restart with {} instances, drover/sqlite", opt.restart_instances).c_str(),
          d->restart_s, e ? fmt::format("{:.2f} s", e->restart_s).c_str() : "-", judge(met));
      bytes_goal("RSS per instance (after that restart), drover/sqlite",
                 d->restart_rss_per_instance_b, e ? e->restart_rss_per_instance_b : 0, 1024);
    } else {
      bytes_goal("RSS per instance, drover/sqlite", d->rss_per_instance_b,
                 e ? e->rss_per_instance_b : 0, 1024);
    }
    bytes_goal("RSS per idle watch stream, drover/sqlite gRPC", d->idle_grpc_watch_b,
               e ? e->idle_grpc_watch_b : 0, 2048);
    bytes_goal("RSS per idle watch stream, drover/sqlite HTTP", d->idle_http_watch_b,
               e ? e->idle_grpc_watch_b : 0, 2048);
  }
}

// `prefix`_p50_ms ... `prefix`_missing from the writes' sending, `prefix`_after_ack_p50_ms and
// _p99_ms from their acknowledgement.
void AddWatch(nlohmann::json& out, const std::string& prefix, const WatchLatency& w) {
  out[prefix + "_p50_ms"] = w.from_send.p50_ms;
  out[prefix + "_p99_ms"] = w.from_send.p99_ms;
  out[prefix + "_max_ms"] = w.from_send.max_ms;
  out[prefix + "_samples"] = w.from_send.samples;
  out[prefix + "_missing"] = w.from_send.missing;
  out[prefix + "_after_ack_p50_ms"] = w.from_ack.p50_ms;
  out[prefix + "_after_ack_p99_ms"] = w.from_ack.p99_ms;
}

nlohmann::json ToJson(const SystemFigures& f) {
  nlohmann::json out = {{"registrations_per_s", f.registrations_per_s},
                        {"http_registrations_per_s", f.http_registrations_per_s},
                        {"store_commits", f.store_commits},
                        {"committed_writes", f.committed_writes},
                        {"rss_per_instance_b", f.rss_per_instance_b},
                        {"rss_per_watcher_b", f.rss_per_watcher_b},
                        {"idle_grpc_watch_b", f.idle_grpc_watch_b},
                        {"idle_http_watch_b", f.idle_http_watch_b},
                        {"restart_s", f.restart_s},
                        {"restart_rss_per_instance_b", f.restart_rss_per_instance_b},
                        {"unary_heartbeats_per_s", f.unary_heartbeats_per_s},
                        {"keepalive_per_s", f.keepalive_per_s},
                        {"batched_heartbeats_per_s", f.batched_heartbeats_per_s},
                        {"puts_per_s", f.puts_per_s},
                        {"errors", f.errors}};
  AddWatch(out, "watch", f.watch);
  AddWatch(out, "http_watch", f.http_watch);
  if (!f.http_watch_reader.empty()) {
    out["http_watch_reader"] = f.http_watch_reader;
    out["http_watch_threads"] = f.http_watch_threads;
  }
  return out;
}

}  // namespace

int BenchMain(int argc, char** argv) {
  Options opt;
#ifdef DROVER_BINARY
  opt.drover = DROVER_BINARY;
#endif
  CLI::App app{
      "Registry throughput and watch latency: drover registry against etcd, both on "
      "loopback in temporary directories, with the same gRPC client (the bench's own, on "
      "libnghttp2)."};
  app.add_option("--drover", opt.drover, "Path of the drover binary")->capture_default_str();
  app.add_option("--etcd", opt.etcd, "etcd binary (PATH is searched); 'off' skips etcd")
      ->capture_default_str();
  app.add_option("--stores", opt.stores,
                 "Drover's store: sqlite, etcd (the registry over an etcd of its own) or both")
      ->check(CLI::IsMember({"sqlite", "etcd", "both"}))
      ->capture_default_str();
  app.add_option("--clients", opt.clients, "Concurrent closed-loop clients")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--connections", opt.connections, "TCP connections the clients share")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--seconds", opt.seconds, "Measured seconds per throughput run")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  app.add_option("--instances", opt.instances, "Instances registered (and keys put)")
      ->check(CLI::Range(2, 1'000'000))
      ->capture_default_str();
  app.add_option("--watchers", opt.watchers, "Concurrent watch streams")
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  app.add_option("--watch-connections", opt.watch_connections,
                 "TCP connections the watch streams share")
      ->check(CLI::Range(1, 10'000))
      ->capture_default_str();
  app.add_option("--idle-watchers", opt.idle_watchers,
                 "Idle watch streams in the fresh servers whose memory per stream is measured "
                 "(each HTTP one is a connection: about as many open files as this are needed)")
      ->check(CLI::Range(2, 100'000))
      ->capture_default_str();
  app.add_option("--warmup-writes", opt.warmup, "Writes sent before the measured ones")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--http-watch-reader", opt.http_watch_reader,
                 "How the bench's threads read their HTTP watch streams: io_uring (a multishot "
                 "receive per stream; epoll where the kernel refuses io_uring) or epoll (a "
                 "recv() per ready stream)")
      ->check(CLI::IsMember({"io_uring", "epoll"}))
      ->capture_default_str();
  app.add_option("--http-watch-threads", opt.http_watch_threads,
                 "Threads reading the HTTP watch streams, each its share (0: one per CPU, as "
                 "the gRPC watchers' client runs a loop per CPU)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--writes", opt.writes, "Writes observed by the watchers")
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  app.add_option("--interval-ms", opt.interval_ms, "Milliseconds between those writes")
      ->check(CLI::Range(0, 10'000))
      ->capture_default_str();
  app.add_option("--batch", opt.batch, "Heartbeats per KeepAlive message in the batched run")
      ->check(CLI::Range(1, 10'000))
      ->capture_default_str();
  app.add_option("--rounds", opt.rounds,
                 "Rounds of --instances registrations per system, taking turns between the "
                 "systems; each registration figure is the median of its rounds")
      ->check(CLI::Range(1, 25))
      ->capture_default_str();
  app.add_option("--restart-instances", opt.restart_instances,
                 "Instances (etcd: keys) stored before a restart whose time to a complete list, "
                 "and memory per instance then, are measured (0: skip)")
      ->check(CLI::Range(0, 1'000'000))
      ->capture_default_str();
  app.add_flag("--json", opt.json, "Print one JSON object instead of the table");
  std::string write_to, system;
  std::int64_t base = 0;
  auto* writer = app.add_option("--write-to", write_to, "(internal) run as the writer process");
  app.add_option("--system", system)->needs(writer)->group("");
  app.add_option("--base", base)->needs(writer)->group("");
  writer->group("");
  if (const auto code = drover::cli::ParseCommandLine(app, argc, argv)) return *code;
  if (!write_to.empty()) {
    return system == "etcd" ? EtcdWriter(opt, write_to, base)
                            : DroverWriter(opt, write_to, static_cast<std::uint64_t>(base));
  }

  if (opt.drover.empty() || ::access(opt.drover.c_str(), X_OK) != 0) {
    Fail("no drover binary at '" + opt.drover + "' (give --drover)");
  }
  // The HTTP watchers hold a connection each, in this process and in the registry (which
  // inherits the limit): up to the hard limit, and a clear error when even that is too low.
  const int files_needed = std::max(opt.watchers, opt.idle_watchers) + 512;
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 &&
                      files.rlim_cur < static_cast<rlim_t>(files_needed)) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, static_cast<rlim_t>(files_needed));
    ::setrlimit(RLIMIT_NOFILE, &files);
    if (files.rlim_cur < static_cast<rlim_t>(files_needed)) {
      Fail(
          fmt::format("{} watchers need about {} open files, and the limit is {} (ulimit -n); "
                      "give fewer (--watchers, --idle-watchers) or raise it",
                      std::max(opt.watchers, opt.idle_watchers), files_needed, files.rlim_max));
    }
  }
  std::optional<SystemFigures> etcd_figures;
  std::string etcd_binary;
  if (opt.etcd == "off" && opt.stores == "both") opt.stores = "sqlite";
  if (opt.etcd != "off") {
    etcd_binary = FindInPath(opt.etcd);
    if (etcd_binary.empty()) {
      Fail("no etcd binary '" + opt.etcd +
           "' (Debian: apt-get install etcd-server; or --etcd off)");
    }
  }
  const bool sqlite = opt.stores != "etcd";
  const bool on_etcd = opt.stores != "sqlite";
  if (on_etcd && etcd_binary.empty()) Fail("--stores etcd needs etcd (not --etcd off)");
  std::optional<SystemFigures> drover_figures, drover_etcd_figures;
  std::fprintf(stderr, "registry_bench: registrations, %d rounds taking turns ...\n", opt.rounds);
  const auto rounds = RegisterInRounds(opt, etcd_binary, sqlite, on_etcd);
  if (sqlite) {
    std::fprintf(stderr, "registry_bench: drover on sqlite ...\n");
    drover_figures = BenchDrover(opt, "");
    std::fprintf(stderr, "registry_bench: drover on sqlite, restarted with %d instances ...\n",
                 opt.restart_instances);
    DroverRestart(opt, *drover_figures);
    std::fprintf(stderr, "registry_bench: drover on sqlite, idle watchers ...\n");
    DroverIdleWatchers(opt, *drover_figures);
  }
  if (on_etcd) {
    std::fprintf(stderr, "registry_bench: drover on etcd ...\n");
    EtcdServer store(etcd_binary);
    drover_etcd_figures = BenchDrover(opt, store.target());
  }
  if (!etcd_binary.empty()) {
    std::fprintf(stderr, "registry_bench: etcd ...\n");
    opt.etcd = etcd_binary;
    etcd_figures = BenchEtcd(opt);
    std::fprintf(stderr, "registry_bench: etcd, restarted with %d keys ...\n",
                 opt.restart_instances);
    EtcdRestart(opt, *etcd_figures);
    std::fprintf(stderr, "registry_bench: etcd, idle watchers ...\n");
    EtcdIdleWatchers(opt, *etcd_figures);
  }
  // The registration rates are the rounds' (the runs above registered what their later phases
  // need).
  const char* names[] = {"drover/sqlite", "drover/etcd", "etcd"};
  std::optional<SystemFigures>* figures[] = {&drover_figures, &drover_etcd_figures, &etcd_figures};
  for (std::size_t i = 0; i < rounds.size(); ++i) {
    if (!rounds[i] || !*figures[i]) continue;
    SystemFigures& f = **figures[i];
    f.registrations_per_s = Median(rounds[i]->grpc);
    f.http_registrations_per_s = Median(rounds[i]->http);
    f.errors += rounds[i]->errors;
    const auto list = [](const std::vector<double>& v) {
      std::string out;
      for (double x : v) out += fmt::format(" {:.0f}", x);
      return out;
    };
    std::fprintf(stderr, "registry_bench: registration rounds, %s: gRPC%s/s; HTTP%s/s\n", names[i],
                 list(rounds[i]->grpc).c_str(), list(rounds[i]->http).c_str());
  }
  if (opt.json) {
    nlohmann::json out = {{"clients", opt.clients},     {"connections", opt.connections},
                          {"instances", opt.instances}, {"rounds", opt.rounds},
                          {"watchers", opt.watchers},   {"idle_watchers", opt.idle_watchers},
                          {"writes", opt.writes}};
    if (drover_figures) out["drover"] = ToJson(*drover_figures);
    if (drover_etcd_figures) out["drover_etcd"] = ToJson(*drover_etcd_figures);
    if (etcd_figures) out["etcd"] = ToJson(*etcd_figures);
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    PrintReport(opt, drover_figures, drover_etcd_figures, etcd_figures);
  }
  return 0;
}

// Whatever throws ends the run with what it was (the peers stopped on the way out), not an abort.
int main(int argc, char** argv) {
  // As the drover binary does (src/cli/main.cc): Debian's Abseil checks lock order on every
  // absl::Mutex lock gRPC takes, a debug-build cost the clients need not pay.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  try {
    return BenchMain(argc, argv);
  } catch (const std::exception& e) {
    Fail(std::string("unexpected error: ") + e.what());
  }
}
