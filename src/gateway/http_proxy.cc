#include "gateway/http_proxy.h"

// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <cerrno>
#include <optional>
#include <span>

#include "drover/router.h"
#include "gateway/http1.h"
#include "gateway/http_check.h"
#include "gateway/retry_budget.h"
#include "gateway/thread_random.h"
#include "gateway/upstream.h"
#include "net/tcp_listener.h"
#include "net/turn_sends.h"

namespace drover::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using boost::system::error_code;
using http1::Framing;

namespace {

// What a connection waiting for its next request reads at once (a typical request head).
constexpr std::size_t kFirstRead = 512;
// What a body relay reads at once.
constexpr std::size_t kBodyRead = 64 * 1024;
// A buffer that grew past this for a large head or body is given back afterwards.
constexpr std::size_t kKeptCapacity = 4096;
// The largest response head read from an instance.
constexpr std::size_t kMaxResponseHead = 64 * 1024;

// RFC 9110 9.2.2; a request whose body was not streamed yet can be sent again.
bool Idempotent(std::string_view method) {
  for (const std::string_view m : {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"}) {
    if (method == m) return true;
  }
  return false;
}

std::string_view View(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

// An instance's response head that could not be read for what it held (HttpExchange::bad_head_
// says what), beside the socket's own errors.
const error_code kBadHead = make_error_code(boost::system::errc::protocol_error);

enum class RelayEnd {
  kDone,
  kRead,         // (Relay::Push only) the body needs more input
  kWrite,        // (Relay::Push only) the output must take what is pending first
  kBadInput,     // the body's framing is broken (the decoder says why)
  kReadFailed,   // the input ended or failed mid-body
  kWriteFailed,  // the output failed
};

// Moves one message to `out`: its head (a string written by the proxy's rules) and its body,
// decoded from `in_buffer` (then from what more `in` sends) and framed again as chunked or
// passed as it is. Push() does all it can without waiting -- the whole of a small message, in
// one gathered write -- and says what it waits for; Finish() does the rest. Input is consumed
// from `in_buffer` only once what was decoded from it was written, so the payload is never
// copied; bytes after the body stay in front of the next message.
class Relay {
 public:
  void Start(std::string_view head, http1::BodyDecoder& body, beast::flat_buffer& in_buffer,
             bool chunk_out) {
    head_ = head;
    body_ = &body;
    in_ = &in_buffer;
    chunk_out_ = chunk_out;
    last_chunk_sent_ = false;
    taken_ = false;
    count_ = first_ = used_ = 0;
  }

  RelayEnd Push(tcp::socket& out) {
    while (true) {
      if (first_ == count_) Fill();
      if (first_ == count_) {
        if (body_->bad()) return RelayEnd::kBadInput;
        return body_->done() ? RelayEnd::kDone : RelayEnd::kRead;
      }
      error_code ec;
      const std::size_t n = drover::net::WriteSome(out, Pending(), ec);
      if (ec == net::error::would_block) return RelayEnd::kWrite;
      if (ec) return RelayEnd::kWriteFailed;
      Wrote(n);
    }
  }

  // The rest of the message, waiting for `in` and `out` (each wait up to `idle`).
  net::awaitable<RelayEnd> Finish(RelayEnd next, beast::tcp_stream& in, beast::tcp_stream& out,
                                  Duration idle) {
    while (next == RelayEnd::kRead || next == RelayEnd::kWrite) {
      error_code ec;
      if (next == RelayEnd::kWrite) {
        out.expires_after(idle);
        const std::size_t n =
            co_await net::async_write(out, Pending(), net::redirect_error(net::use_awaitable, ec));
        if (ec) co_return RelayEnd::kWriteFailed;
        Wrote(n);
      } else {
        in.expires_after(idle);
        const std::size_t n = co_await in.async_read_some(
            in_->prepare(kBodyRead), net::redirect_error(net::use_awaitable, ec));
        in_->commit(n);
        // The end of the input ends a body framed by it; any other it cuts short.
        if (ec == net::error::eof && body_->End()) ec = {};
        if (ec) co_return RelayEnd::kReadFailed;
      }
      next = Push(out.socket());
    }
    if (in_->size() == 0 && in_->capacity() > kKeptCapacity) in_->shrink_to_fit();
    co_return next;
  }

  // A byte of the body was taken from the input.
  bool taken() const { return taken_; }

  // What Push() would write next (empty: nothing now), and (Wrote) the report of a write of it
  // made elsewhere (PushAtTurnEnd).
  std::span<const net::const_buffer> Next() {
    if (first_ == count_) Fill();
    return Pending();
  }
  void Wrote(std::size_t n) {
    while (first_ < count_ && n >= buffers_[first_].size()) n -= buffers_[first_++].size();
    if (first_ < count_) {
      buffers_[first_] += n;
    } else {
      Consume();
    }
  }

 private:
  static constexpr std::size_t kPieces = 16;  // payload pieces per write

  // The head (the first time) and what the body decodes from `in_` now, framed for `out`.
  void Fill() {
    count_ = first_ = used_ = 0;
    if (!head_.empty()) {
      Add(head_);
      head_ = {};
    }
    std::string_view input = View(*in_);
    for (std::size_t piece = 0; piece < kPieces && !body_->done() && !body_->bad();) {
      const http1::BodyDecoder::Step step = body_->Next(input);
      if (step.used == 0) break;
      input.remove_prefix(step.used);
      used_ += step.used;
      taken_ = true;
      if (step.data.empty()) continue;
      if (chunk_out_) Add(http1::AppendChunkHeader(step.data.size(), chunk_headers_[piece]));
      Add(step.data);
      if (chunk_out_) Add(http1::kCrlf);
      ++piece;
    }
    if (chunk_out_ && body_->done() && !last_chunk_sent_) {
      Add(http1::kLastChunk);
      last_chunk_sent_ = true;
    }
    if (count_ == 0) Consume();  // framing only (a chunk-size line split by the read)
  }
  void Add(std::string_view s) { buffers_[count_++] = net::const_buffer(s.data(), s.size()); }
  std::span<const net::const_buffer> Pending() const {
    return {buffers_.data() + first_, count_ - first_};
  }
  void Consume() {
    in_->consume(used_);
    used_ = 0;
  }

  std::string_view head_;  // not yet written
  http1::BodyDecoder* body_ = nullptr;
  beast::flat_buffer* in_ = nullptr;
  bool chunk_out_ = false;
  bool last_chunk_sent_ = false;
  bool taken_ = false;
  std::array<net::const_buffer, 3 * kPieces + 2> buffers_;
  std::size_t count_ = 0;  // buffers_ filled
  std::size_t first_ = 0;  // the first not yet written
  std::size_t used_ = 0;   // input bytes they were decoded from
  char chunk_headers_[kPieces][18];
};

}  // namespace

struct HttpClient;

// The keep-alive clients of one worker waiting for their next request, oldest first: every client
// of a listener has the same idle timeout, so the order they parked in is the order they expire
// in, and the sweep looks at the front only. Intrusive (the links are the clients'); touched on
// the worker's thread only.
class IdleClients {
 public:
  void PushBack(HttpClient& c);
  void Remove(HttpClient& c);
  HttpClient* front() const { return head_; }

 private:
  HttpClient* head_ = nullptr;
  HttpClient* tail_ = nullptr;
};

// What an active connection works in: its buffers, parsed heads, written heads and relay. Kept
// on its worker's spare list between uses, so that their storage is reused from one request (and
// one connection) to the next instead of allocated for each.
struct HttpScratch {
  beast::flat_buffer client_in;    // read from the client, not yet taken
  beast::flat_buffer upstream_in;  // read from the instance, not yet taken
  http1::Head request, response;   // views into client_in / upstream_in
  http1::BodyDecoder request_body, response_body;
  std::string request_head, response_head;  // as sent
  Relay relay;
  std::vector<std::size_t> tried;    // instances tried for the request in flight
  std::vector<std::size_t> passed;   // a hot key's owners before the rank drawn for the request
  std::vector<std::size_t> exclude;  // passed + tried, for the pick (scratch)
  // The streams the client's and the instance's sockets go into while a request runs, kept like
  // the rest: a Beast stream's state is one shared allocation with two timers, and made for every
  // request the two were two malloc and free per request. Between uses their sockets are closed.
  std::optional<beast::tcp_stream> client_stream, upstream_stream;

  // `slot`'s stream (made the first time with `socket`'s executor: its worker's), over `socket`.
  static beast::tcp_stream& Over(std::optional<beast::tcp_stream>& slot, tcp::socket socket) {
    if (!slot) slot.emplace(socket.get_executor());
    slot->socket() = std::move(socket);
    return *slot;
  }
};

// What one worker thread keeps for the listener: its upstream connection pool, its idle clients
// and its spare scratch. Owned by the worker's sweeper and the clients on it; a pool's sockets
// belong to the worker's io_context and must go with it.
struct HttpWorker {
  static constexpr std::size_t kSpareScratch = 128;
  explicit HttpWorker(UpstreamPool::Options o) : pool(o) {}
  std::unique_ptr<HttpScratch> TakeScratch() {
    if (spare.empty()) return std::make_unique<HttpScratch>();
    std::unique_ptr<HttpScratch> s = std::move(spare.back());
    spare.pop_back();
    return s;
  }
  void GiveBack(std::unique_ptr<HttpScratch> s) {
    if (spare.size() >= kSpareScratch) return;
    s->client_in.clear();
    s->upstream_in.clear();
    if (s->client_in.capacity() > kKeptCapacity) s->client_in.shrink_to_fit();
    if (s->upstream_in.capacity() > kKeptCapacity) s->upstream_in.shrink_to_fit();
    spare.push_back(std::move(s));
  }

  // A server coroutine (HttpProxy::State::Server) waiting for the next client to serve: the
  // handler that resumes it, given the client (nullptr: end).
  using Resume = net::detail::awaitable_handler<net::any_io_executor, std::shared_ptr<HttpClient>>;
  static constexpr std::size_t kSpareServers = 256;

  UpstreamPool pool;
  std::vector<Upstream::SnapshotReader> snapshots;  // one per route, in route order
  IdleClients idle;
  std::vector<std::unique_ptr<HttpScratch>> spare;
  std::vector<Resume> servers;  // waiting, the most recent last
};

// One client connection, for as long as it is open; touched only on its worker's thread. Between
// requests nothing else exists for it: no coroutine, parser or buffer, only this object (owned by
// the handler of its pending readiness wait) and the socket's reactor entry. A request takes the
// socket into an HttpConn and gives it back.
struct HttpClient {
  HttpClient(tcp::socket s, std::shared_ptr<HttpProxy::State> st, std::shared_ptr<HttpWorker> w,
             drover::net::Connection n)
      : socket(std::move(s)),
        state(std::move(st)),
        worker(std::move(w)),
        connection(std::move(n)) {}
  ~HttpClient() {
    if (parked) worker->idle.Remove(*this);
  }

  tcp::socket socket;  // while waiting for a request; in `active`'s stream while one runs
  const std::shared_ptr<HttpProxy::State> state;
  const std::shared_ptr<HttpWorker> worker;
  drover::net::Connection connection;  // open (for the listener) while this lives; its peer
  struct HttpConn* active = nullptr;   // the connection's requests, while they run
  bool watched = false;                // for the peer's end (net::WatchPeerEnd)
  // On worker->idle while parked.
  bool parked = false;
  MonoTime idle_since{};
  HttpClient* idle_prev = nullptr;
  HttpClient* idle_next = nullptr;
};

void IdleClients::PushBack(HttpClient& c) {
  c.idle_prev = tail_;
  c.idle_next = nullptr;
  (tail_ ? tail_->idle_next : head_) = &c;
  tail_ = &c;
  c.parked = true;
}

void IdleClients::Remove(HttpClient& c) {
  (c.idle_prev ? c.idle_prev->idle_next : head_) = c.idle_next;
  (c.idle_next ? c.idle_next->idle_prev : tail_) = c.idle_prev;
  c.idle_prev = c.idle_next = nullptr;
  c.parked = false;
}

// A client connection's requests, from the first byte of one to the moment it waits again with
// nothing to read; touched only on its worker's thread.
struct HttpConn {
  HttpConn(tcp::socket s, HttpWorker& w, const tcp::endpoint& p)
      : scratch(w.TakeScratch()),
        client(HttpScratch::Over(scratch->client_stream, std::move(s))),
        pool(w.pool),
        worker(w),
        peer(p) {}
  ~HttpConn() {
    // (Both are closed or given away by now; a socket left in a spare stream would stay open.)
    error_code ignored;
    client.socket().close(ignored);
    if (upstream) upstream->socket().close(ignored);
    worker.GiveBack(std::move(scratch));
  }
  HttpConn(const HttpConn&) = delete;
  HttpConn& operator=(const HttpConn&) = delete;
  // Connections close with close() alone, no shutdown first: close sends the FIN (or a reset, when
  // bytes are left unread, as a shutdown would not prevent), and ends the operations pending on it.
  void CloseBoth() {
    client.close();
    if (upstream) upstream->close();
  }

  std::unique_ptr<HttpScratch> scratch;
  beast::tcp_stream& client;  // scratch's client_stream
  // The upstream connection of the request in flight (scratch's upstream_stream), or none.
  beast::tcp_stream* upstream = nullptr;
  UpstreamPool& pool;  // its io thread's
  HttpWorker& worker;
  const tcp::endpoint& peer;  // the client's (its HttpClient's Connection outlives this)
  bool in_request = false;    // between a request head and its response's end
};

struct HttpProxy::State : std::enable_shared_from_this<State> {
  State(const Workers& w, const ListenerConfig& c, std::vector<Upstream*> u, Clock& k)
      : workers(w),
        config(c),
        routes(std::move(u)),
        clock(k),
        budget(c.retry_budget_percent, c.retry_budget_min) {
    for (std::size_t i = 0; i < workers.size(); ++i) {
      auto& worker = per_worker.emplace_back(std::make_shared<HttpWorker>(
          UpstreamPool::Options{c.upstream_max_age, c.upstream_idle_timeout,
                                static_cast<std::size_t>(c.max_idle_per_instance)}));
      for (const Upstream* upstream : routes) worker->snapshots.push_back(upstream->Reader());
    }
    for (std::size_t i = 0; i < config.routes.size(); ++i) route_order.push_back(i);
    std::sort(route_order.begin(), route_order.end(), [this](std::size_t a, std::size_t b) {
      return config.routes[a].prefix.size() > config.routes[b].prefix.size();
    });
  }

  // Per worker: closes pooled upstream connections past their idle time or age, and clients idle
  // past idle_timeout.
  net::awaitable<void> Sweep(std::shared_ptr<HttpWorker> worker, net::any_io_executor executor);
  // A new client: parked until its first request (net::TcpListener::Serve).
  void Serve(tcp::socket client, drover::net::Connection connection);
  // Waits for the client's next request without a coroutine: a readiness wait whose handler
  // hands the client to a server (Wake), and a place on its worker's idle list.
  void Park(std::shared_ptr<HttpClient> client);
  // Serves `client` on a server coroutine of its worker: a waiting one, resumed on this
  // thread before Wake returns (no spawn, no post: the request is read and sent upstream in the
  // turn of the loop that found it), else a new one. Called by a handler, never by a coroutine.
  void Wake(std::shared_ptr<HttpClient> client);
  // One server: serves a client's requests while it has bytes for one and parks it again (or
  // closes it), then waits on its worker for the next client (up to
  // HttpWorker::kSpareServers wait; the others end). Ends when the listener drains.
  net::awaitable<void> Server(std::shared_ptr<HttpClient> client);
  // The next client for a server to serve (nullptr: end), from Wake.
  static net::awaitable<std::shared_ptr<HttpClient>> NextClient(HttpWorker& worker);
  // The worker whose io_context `executor` belongs to.
  std::size_t WorkerOf(const net::any_io_executor& executor) const {
    const auto& context = net::query(executor, net::execution::context);
    for (std::size_t w = 0; w < workers.size(); ++w) {
      if (&context == workers[w]) return w;
    }
    return 0;
  }
  // A plain-text answer of the gateway's own (`text` and a newline).
  net::awaitable<void> Reply(HttpConn& c, unsigned status, std::string_view text, bool keep_alive);
  std::optional<std::size_t> MatchRoute(std::string_view path) const {
    for (const std::size_t i : route_order) {
      if (path.starts_with(config.routes[i].prefix)) return i;
    }
    return std::nullopt;
  }

  const Workers workers;
  const ListenerConfig config;
  const std::vector<Upstream*> routes;   // per config.routes
  std::vector<std::size_t> route_order;  // longest prefix first
  Clock& clock;
  ListenerCounters counters;
  // Per worker; the State keeps them only until Start() has handed them to the workers' sweepers
  // and clients: a pool's sockets belong to its worker's io_context and must go with it.
  std::vector<std::shared_ptr<HttpWorker>> per_worker;
  std::vector<std::weak_ptr<HttpWorker>> worker_views;  // for stats and new clients
  RetryBudget budget;
  std::atomic<bool> draining{false};
};

namespace {

// Over max_connections: a 503 saying so, then close, without reading the request.
const std::string kBusy =
    "HTTP/1.1 503 Service Unavailable\r\nServer: drover-gateway\r\nContent-Type: text/plain\r\n"
    "Retry-After: 1\r\nConnection: close\r\nContent-Length: 35\r\n\r\n"
    "too many connections to this port\r\n";

}  // namespace

// One request through the proxy, in the manner of Envoy's router: Run() reads the head (ReadHead),
// Prepare() checks it, writes the one sent upstream and finds the route; Run() then makes
// attempts, each on one instance, until one ends done or the retry policy (route.retries, the
// listener's RetryBudget, what was sent) says stop. An attempt is: TakePooled (else Connect), the
// request sent (StartRequest, then FinishRequest when it must wait; SendRequest after a 100
// Continue), ReadResponseHead, the response relayed (StartResponse, EndResponse), Release (back
// to the pool), and ends done, retry, fail or abort. Only waits are coroutines: a request and
// response that fit the sockets' buffers go through Relay::Push with none.
class HttpExchange {
 public:
  HttpExchange(HttpProxy::State& s, HttpConn& c) : s_(s), c_(c), x_(*c.scratch) {}

  // One request from its head (what the connection's client_in holds first) to the end of its
  // response; false when the client connection must close.
  net::awaitable<bool> Run();

 private:
  enum class AttemptEnd {
    kDone,   // the response was relayed (keep_ says whether the client connection stays)
    kRetry,  // failed where the instance cannot have acted on the request: try another
    kFail,   // failed: answer failure_ / failure_text_ to the client
    kAbort,  // the client connection is gone or holds part of a response: close it, no answer
  };
  struct Reject {
    unsigned status;
    std::string text;
    bool keep;
  };
  // The instance of the attempt in flight.
  struct Target {
    std::size_t index;
    const router::Endpoint& endpoint;
    InstanceCounters& counters;
    const std::string& pool_key;
    MonoTime retire_at{};
  };

  // The request head into x_.request, read further while it is not all in client_in; false
  // when the connection must close (the client left, or was answered 400 or 431).
  net::awaitable<bool> ReadHead(http1::HeadParser& parser);
  std::optional<Reject> Prepare();
  // Takes `retry`'s slot before every attempt after the first; false when the budget is spent.
  bool StartRetry(RetryBudget::Retry& retry);
  net::awaitable<AttemptEnd> Attempt(std::size_t pick);
  bool TakePooled(Target& t, bool check_closed);
  net::awaitable<AttemptEnd> Connect(Target& t);
  // Relay::Push once the loop has read what else this turn reported, the turn's writes going out
  // together in one system call (net::TurnSends, where the thread has one).
  net::awaitable<RelayEnd> PushAtTurnEnd(drover::net::TurnSends& sends, tcp::socket& socket);
  // The request, after a 100 Continue to the client.
  net::awaitable<AttemptEnd> SendRequest();
  // Starts sending the request (head and body); what it needs next, see Relay::Push.
  RelayEnd StartRequest();
  void StartRequestRelay();  // StartRequest without the write
  static bool Waits(RelayEnd end) {
    return end == RelayEnd::kRead || end == RelayEnd::kWrite || end == RelayEnd::kBadInput;
  }
  // The rest of the request (Waits), and a broken body answered 400.
  net::awaitable<AttemptEnd> FinishRequest(RelayEnd end);
  // kDone: sent; kRetry: the upstream failed while taking it (the caller reads no answer);
  // kAbort: the client left mid-body.
  AttemptEnd RequestEnd(RelayEnd end);
  // Reads the response head into x_.response (its bytes still in upstream_in), interim 1xx
  // answers skipped.
  net::awaitable<error_code> ReadResponseHead();
  AttemptEnd HeadFailed(const Target& t, const error_code& ec);
  // Reports the answer, writes the head for the client and starts relaying the response.
  void StartResponse(Target& t);
  AttemptEnd EndResponse(Target& t, RelayEnd end);
  void Release(Target& t, bool upstream_keep);
  // The instance's fault: counts toward its ejection.
  void Failed(const Target& t);
  void DropUpstream() {
    if (c_.upstream) c_.upstream->close();
    c_.upstream = nullptr;
  }
  bool KeepClient() const {
    return client_keep_ && x_.request_body.done() && !s_.draining.load(std::memory_order_relaxed);
  }

  HttpProxy::State& s_;
  HttpConn& c_;
  HttpScratch& x_;

  // Set by Prepare().
  unsigned version_ = 11;
  std::string_view method_, path_;  // in x_.request_head once it is written
  const RouteConfig* route_ = nullptr;
  std::size_t route_index_ = 0;
  Upstream* upstream_ = nullptr;
  bool client_keep_ = false;
  bool idempotent_ = false;
  bool head_ = false;
  bool expect_continue_ = false;
  std::uint64_t key_hash_ = 0;
  bool keyed_ = false;  // the key came from the request (a hot one may pass over its first owners)
  // Across attempts.
  std::shared_ptr<const UpstreamSnapshot> snapshot_;
  bool body_read_ = false;  // a byte of the request body was taken from the client
  unsigned failure_ = 502;
  std::string failure_text_;
  std::string_view bad_head_;      // why the response head was malformed
  std::size_t response_size_ = 0;  // of the response head, in upstream_in
  bool keep_ = false;              // after kDone: the client connection stays
};

net::awaitable<void> HttpProxy::State::Sweep(std::shared_ptr<HttpWorker> worker,
                                             net::any_io_executor executor) {
  auto self = shared_from_this();
  // A client is closed between idle_timeout and an eighth of it later.
  const Duration every =
      std::clamp<Duration>(std::min(config.upstream_idle_timeout / 2, config.idle_timeout / 8),
                           std::chrono::milliseconds(10), std::chrono::seconds(1));
  net::steady_timer timer(executor);
  while (!draining.load(std::memory_order_relaxed)) {
    timer.expires_after(every);
    error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    const MonoTime now = clock.Now();
    worker->pool.Sweep(now);
    while (HttpClient* idle = worker->idle.front()) {
      if (now - idle->idle_since < config.idle_timeout) break;
      // Its wait ends (operation_aborted) and its handler lets go of it.
      worker->idle.Remove(*idle);
      error_code ignored;
      idle->socket.close(ignored);
      counters.idle_timeouts.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Draining: the pool lives on in the connections still using it; the idle clients were closed
  // by their closers. The waiting servers end (each on its own turn of the loop).
  for (HttpWorker::Resume& resume : std::exchange(worker->servers, {})) {
    net::post(executor, [resume = std::move(resume)]() mutable { resume(nullptr); });
  }
}

net::awaitable<void> HttpProxy::State::Reply(HttpConn& c, unsigned status, std::string_view text,
                                             bool keep_alive) {
  std::string& out = c.scratch->response_head;
  out.clear();
  out.append("HTTP/1.1 ")
      .append(std::to_string(status))
      .append(" ")
      .append(http1::ReasonPhrase(status))
      .append("\r\nContent-Type: text/plain; charset=utf-8\r\n")
      .append(keep_alive ? "" : "Connection: close\r\n")
      .append("Content-Length: ")
      .append(std::to_string(text.size() + 1))
      .append("\r\n\r\n")
      .append(text)
      .append("\n");
  error_code ec;
  const net::const_buffer all = net::buffer(out);
  const std::size_t n = drover::net::WriteSome(c.client.socket(), {&all, 1}, ec);
  if (ec == net::error::would_block || (!ec && n < out.size())) {
    c.client.expires_after(config.idle_timeout);
    co_await net::async_write(c.client, net::buffer(out) + n,
                              net::redirect_error(net::use_awaitable, ec));
  }
}

void HttpProxy::State::Serve(tcp::socket socket, drover::net::Connection connection) {
  std::shared_ptr<HttpWorker> worker = worker_views[WorkerOf(socket.get_executor())].lock();
  if (!worker) return;                   // its worker is shutting down
  drover::net::MarkNonBlocking(socket);  // reads and writes are tried at once (Server, Relay)
  auto client = std::make_shared<HttpClient>(std::move(socket), shared_from_this(),
                                             std::move(worker), std::move(connection));
  // Draining: keep-alive connections waiting for their next request close now; the others get
  // "Connection: close" on their response.
  client->connection.OnClose(
      [weak = std::weak_ptr<HttpClient>(client)](drover::net::CloseReason reason) {
        const std::shared_ptr<HttpClient> c = weak.lock();
        if (!c) return;
        if (c->active == nullptr) {  // parked: its wait ends and its handler lets go of it
          error_code ignored;
          c->socket.close(ignored);
        } else if (reason == drover::net::CloseReason::kCloseNow) {
          c->active->CloseBoth();
        } else if (!c->active->in_request) {
          c->active->client.close();
        }
      });
  if (draining.load(std::memory_order_relaxed)) return;  // (accepted as the drain began)
  // A new connection's request rarely came with its handshake: reading now would mostly answer
  // EAGAIN. Its first readiness wakes a server (Wake), as for a client between requests.
  Park(std::move(client));
}

void HttpProxy::State::Park(std::shared_ptr<HttpClient> client) {
  client->idle_since = clock.Now();
  client->worker->idle.PushBack(*client);
  tcp::socket& socket = client->socket;
  // No system call when the last read took all there was (net::WaitReadable): a request-response
  // exchange parks for free.
  drover::net::WaitReadable(socket, [client = std::move(client)](error_code ec) mutable {
    if (client->parked) client->worker->idle.Remove(*client);
    if (ec || !client->socket.is_open()) return;  // closed: by the sweep, a closer or shutdown
    HttpProxy::State& state = *client->state;
    state.Wake(std::move(client));
  });
}

void HttpProxy::State::Wake(std::shared_ptr<HttpClient> client) {
  std::vector<HttpWorker::Resume>& servers = client->worker->servers;
  if (servers.empty()) {
    const net::any_io_executor executor = client->socket.get_executor();
    net::co_spawn(executor, Server(std::move(client)), net::detached);
    return;
  }
  HttpWorker::Resume resume = std::move(servers.back());
  servers.pop_back();
  resume(std::move(client));  // runs the server until its first wait
}

net::awaitable<std::shared_ptr<HttpClient>> HttpProxy::State::NextClient(HttpWorker& worker) {
  return net::async_initiate<const net::use_awaitable_t<>, void(std::shared_ptr<HttpClient>)>(
      [&worker](auto resume) {
        static_assert(std::is_same_v<decltype(resume), HttpWorker::Resume>);
        worker.servers.push_back(std::move(resume));
      },
      net::use_awaitable);
}

net::awaitable<void> HttpProxy::State::Server(std::shared_ptr<HttpClient> client) {
  auto self = shared_from_this();
  std::shared_ptr<HttpWorker> worker = client->worker;
  while (true) {
    {  // The client's requests while it has bytes for one; then it parks (or closes).
      HttpConn c(std::move(client->socket), *client->worker, client->connection.peer());
      client->active = &c;
      beast::flat_buffer& buffer = c.scratch->client_in;
      bool keep = true;
      bool idle = false;
      // Woken by readiness: the request is usually there. After a response the
      // client parks again unless it already sent more (pipelining): a read now would find nothing
      // in a request-response exchange, and that empty read was a system call per request (perf
      // stat: 8.05 -> 7.07 calls per keep-alive request).
      bool read = true;
      while (keep && !draining.load(std::memory_order_relaxed)) {
        if (buffer.size() == 0) {
          if (!read) {
            idle = true;
            break;
          }
          error_code ec;
          const std::size_t n =
              drover::net::ReadSome(c.client.socket(), buffer.prepare(kFirstRead), ec);
          buffer.commit(n);
          if (ec == net::error::would_block) {
            idle = true;  // a wake-up without bytes (or a new connection with none yet)
            break;
          }
          if (ec) break;  // the client closed, or the closer did
        }
        read = false;
        keep = co_await HttpExchange(*this, c).Run();
      }
      client->active = nullptr;
      if (idle && c.client.socket().is_open() && !draining.load(std::memory_order_relaxed)) {
        client->socket = c.client.release_socket();
        // A request read with the client's end behind it leaves no edge for that end, so on an
        // unwatched socket only a read that finds nothing counts as drained (net::ReadSome):
        // watched, a read that takes all there is does, and parking costs no system call. The
        // listener registers each client for its end as it accepts it (watch_peer_end), so
        // this costs nothing; with another reactor it is one EPOLL_CTL_MOD per connection.
        if (!client->watched) client->watched = drover::net::WatchPeerEnd(client->socket);
        Park(std::move(client));
      } else {
        c.client.close();
      }
    }
    client.reset();  // (closed: its Connection ends with it)
    if (draining.load(std::memory_order_relaxed) ||
        worker->servers.size() >= HttpWorker::kSpareServers) {
      co_return;
    }
    // While it waits a server owns nothing: a worker that goes (the io_context shutting down)
    // destroys the waiting servers with it. (The sweep, which ends only on this thread and only
    // when draining, keeps the worker until then.)
    HttpWorker& w = *worker;
    worker.reset();
    self.reset();
    client = co_await NextClient(w);
    if (!client) co_return;
    worker = client->worker;
    self = client->state;
  }
}

net::awaitable<bool> HttpExchange::ReadHead(http1::HeadParser& parser) {
  beast::flat_buffer& buffer = x_.client_in;
  // The head from what was read, when it is all there (the usual case: no more I/O); else the
  // rest is read.
  http1::ParseResult parsed;
  while ((parsed = parser.Request(View(buffer), x_.request)) == http1::ParseResult::kNeedMore) {
    error_code ec;
    c_.client.expires_after(s_.config.idle_timeout);
    const std::size_t n = co_await c_.client.async_read_some(
        buffer.prepare(std::max<std::size_t>(kFirstRead, buffer.size())),
        net::redirect_error(net::use_awaitable, ec));
    buffer.commit(n);
    if (ec) co_return false;  // gone (or silent past the idle timeout) before a whole head
  }
  if (parsed == http1::ParseResult::kTooLarge) {
    s_.counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
    co_await s_.Reply(
        c_, 431,
        "request head larger than " + std::to_string(s_.config.max_header_bytes) + " bytes", false);
    co_return false;
  }
  if (parsed == http1::ParseResult::kBad) {
    s_.counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
    co_await s_.Reply(c_, 400, "bad request: " + std::string(parser.error()), false);
    co_return false;
  }
  co_return true;
}

std::optional<HttpExchange::Reject> HttpExchange::Prepare() {
  const http1::Head& req = x_.request;
  version_ = req.version;
  if (const std::string_view invalid = CheckRequestHead(req); !invalid.empty()) {
    s_.counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
    return Reject{400, "bad request: " + std::string(invalid), false};
  }
  x_.request_body.Start(req.framing, req.content_length);
  const std::string_view path = req.target.substr(0, req.target.find('?'));
  const std::optional<std::size_t> route = s_.MatchRoute(path);
  if (!route) {
    s_.counters.no_route.fetch_add(1, std::memory_order_relaxed);
    // An unread body would be taken for the next request: close instead.
    return Reject{404, "no route for " + std::string(path),
                  req.keep_alive && x_.request_body.done()};
  }
  route_ = &s_.config.routes[*route];
  route_index_ = *route;
  upstream_ = s_.routes[*route];

  client_keep_ = req.keep_alive;
  idempotent_ = Idempotent(req.method);
  head_ = req.method == "HEAD";
  if (const http1::Field* expect = req.Find("expect")) {
    if (!http1::EqualsIgnoreCase(expect->value, "100-continue")) {
      return Reject{417, "only 100-continue is supported", false};
    }
    // Answered here (the upstream just gets the body); HTTP/1.0 knows no interim answers (RFC
    // 9110 10.1.1): its body just goes on.
    expect_continue_ = version_ == 11 && !x_.request_body.done();
  }
  keyed_ = false;
  if (route_->policy == Policy::kHash) {
    const http1::Field* key = req.Find(route_->hash_header);
    keyed_ = key != nullptr;
    key_hash_ = keyed_ ? router::HashKey(key->value) : ThreadRandom().Next();
    if (keyed_) upstream_->RecordKey(key->value);
  }
  // (Formatted per request rather than kept by every idle client: 32 bytes each.)
  WriteRequestHead(req, drover::net::AddressText(c_.peer.address()), x_.request_head);
  method_ = std::string_view(x_.request_head).substr(0, req.method.size());
  path_ = std::string_view(x_.request_head).substr(req.method.size() + 1, path.size());
  return std::nullopt;
}

net::awaitable<bool> HttpExchange::Run() {
  http1::HeadParser parser(s_.config.max_header_bytes);
  // (A whole head in the buffer takes no wait: no coroutine frame for ReadHead.)
  if (parser.Request(View(x_.client_in), x_.request) != http1::ParseResult::kDone &&
      !co_await ReadHead(parser)) {
    co_return false;
  }
  s_.counters.requests.fetch_add(1, std::memory_order_relaxed);
  c_.in_request = true;
  struct InRequest {
    HttpConn& c;
    ~InRequest() {
      c.in_request = false;
      beast::flat_buffer& b = c.scratch->client_in;
      if (b.size() == 0 && b.capacity() > kKeptCapacity) b.shrink_to_fit();
    }
  } in_request{c_};
  // (The head's views stay valid until the buffer is written to: Prepare() is done with them
  // before the body is read.)
  x_.client_in.consume(parser.size());
  if (std::optional<Reject> reject = Prepare()) {
    co_await s_.Reply(c_, reject->status, reject->text, reject->keep);
    co_return reject->keep;
  }
  const RetryBudget::Request in_budget(s_.budget);

  snapshot_ = c_.worker.snapshots[route_index_].Current();
  x_.tried.clear();
  x_.passed.clear();
  if (keyed_) upstream_->PassedOwners(*snapshot_, key_hash_, ThreadRandom(), x_.passed);
  for (int attempt = 0; attempt <= route_->retries; ++attempt) {
    RetryBudget::Retry retry(s_.budget);
    if (attempt > 0 && !StartRetry(retry)) break;

    const Result<std::size_t> pick = upstream_->PickPassing(
        *snapshot_, key_hash_, x_.passed, x_.tried, s_.clock.Now(), ThreadRandom(), x_.exclude);
    if (!pick.ok()) {
      if (x_.tried.empty()) failure_ = 503;
      failure_text_ = pick.status().message() + (x_.tried.empty() ? "" : "; " + failure_text_);
      break;
    }
    x_.tried.push_back(*pick);
    const AttemptEnd end = co_await Attempt(*pick);
    if (end == AttemptEnd::kDone) co_return keep_;
    if (end == AttemptEnd::kAbort) co_return false;
    if (end == AttemptEnd::kFail) break;
  }

  s_.counters.no_upstream.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("gateway {}: {} {}: {} {}", s_.config.name, method_, path_, failure_,
                failure_text_);
  const bool keep = KeepClient();
  co_await s_.Reply(c_, failure_, failure_text_, keep);
  co_return keep;
}

bool HttpExchange::StartRetry(RetryBudget::Retry& retry) {
  if (!retry.Take()) {
    s_.counters.budget_exhausted.fetch_add(1, std::memory_order_relaxed);
    failure_text_ += "; no retry: the retry budget is spent";
    return false;
  }
  s_.counters.retries.fetch_add(1, std::memory_order_relaxed);
  return true;
}

net::awaitable<HttpExchange::AttemptEnd> HttpExchange::Attempt(std::size_t pick) {
  Target t{pick, snapshot_->router->table->at(pick), *snapshot_->counters[pick],
           snapshot_->pool_keys[pick]};
  // A request that can go again unharmed -- idempotent, and all of it in hand -- takes a pooled
  // connection without the pool's liveness peek (a system call per request). If the instance
  // had closed that connection, the first read finds its end (or its reset) before a byte of
  // answer: not the instance's failure and not a retry, the request just goes again on a checked
  // or new connection to the same instance.
  bool unchecked = idempotent_ && x_.request_body.done() && !expect_continue_;
  InstanceCounters* counted = nullptr;  // once the request went to the instance
  struct InFlight {
    InstanceCounters*& ic;
    ~InFlight() {
      if (ic) ic->active.fetch_sub(1, std::memory_order_relaxed);
    }
  } in_flight{counted};
  drover::net::TurnSends* const turn = drover::net::TurnSends::ForThisThread();
  error_code ec;
  while (true) {
    if (!TakePooled(t, !unchecked)) {
      unchecked = false;
      if (const AttemptEnd end = co_await Connect(t); end != AttemptEnd::kDone) co_return end;
    }
    if (!counted) {
      t.counters.requests.fetch_add(1, std::memory_order_relaxed);
      t.counters.active.fetch_add(1, std::memory_order_relaxed);
      counted = &t.counters;
    }
    AttemptEnd sent;
    if (expect_continue_) {
      sent = co_await SendRequest();
    } else {
      // With the turn's other writes, where the thread gathers them (sixteenth pass).
      RelayEnd end;
      if (turn != nullptr) {
        StartRequestRelay();
        end = co_await PushAtTurnEnd(*turn, c_.upstream->socket());
      } else {
        end = StartRequest();
      }
      sent = Waits(end) ? co_await FinishRequest(end) : RequestEnd(end);
    }
    if (sent == AttemptEnd::kAbort) co_return sent;
    ec = sent == AttemptEnd::kDone ? co_await ReadResponseHead()
                                   : error_code(net::error::connection_reset);
    // (A failed write arrives here as connection_reset.)
    const bool closed_before_answer = ec == net::error::eof || ec == net::error::connection_reset;
    if (!unchecked || !closed_before_answer || x_.upstream_in.size() > 0) break;
    c_.pool.FoundClosed();
    DropUpstream();
    unchecked = false;
  }
  if (ec) co_return HeadFailed(t, ec);
  // The answer goes to the client once the worker has read whatever else was ready with it (no
  // system call to wait): a turn of the loop reads its batch, then writes its batch, as HAProxy's
  // loop does. Writing each answer as soon as it was read, the worker was preempted by the
  // clients it woke 2-3 times as often as HAProxy, and its p99 followed (ARCHITECTURE, gateway
  // speed, fourteenth pass). Where the thread gathers the turn's writes, they go in one system
  // call (sixteenth pass); else each after a post.
  StartResponse(t);
  RelayEnd end;
  if (turn != nullptr) {
    end = co_await PushAtTurnEnd(*turn, c_.client.socket());
  } else {
    co_await net::post(c_.client.get_executor(), net::use_awaitable);
    end = x_.relay.Push(c_.client.socket());
  }
  if (end == RelayEnd::kRead || end == RelayEnd::kWrite) {
    end = co_await x_.relay.Finish(end, *c_.upstream, c_.client, s_.config.idle_timeout);
  }
  co_return EndResponse(t, end);
}

bool HttpExchange::TakePooled(Target& t, bool check_closed) {
  std::optional<tcp::socket> pooled =
      c_.pool.Take(t.pool_key, s_.clock.Now(), &t.retire_at, check_closed);
  if (!pooled) return false;
  c_.upstream = &HttpScratch::Over(x_.upstream_stream, std::move(*pooled));
  s_.counters.upstream_reused.fetch_add(1, std::memory_order_relaxed);
  return true;
}

net::awaitable<HttpExchange::AttemptEnd> HttpExchange::Connect(Target& t) {
  const router::Endpoint& e = t.endpoint;
  error_code ec;
  const auto to = drover::net::ParseEndpoint(e.address, "instance address");
  c_.upstream = &HttpScratch::Over(x_.upstream_stream, tcp::socket(c_.client.get_executor()));
  if (to.ok()) {
    ec = co_await drover::net::Connect(c_.upstream->socket(), *to, s_.config.connect_timeout);
  } else {
    ec = net::error::invalid_argument;
  }
  if (ec) {
    // (A good connect is not reported: the answer is, and a 5xx streak must not reset.)
    upstream_->ReportConnect(*snapshot_, t.index, false, s_.clock.Now());
    t.counters.connect_failures.fetch_add(1, std::memory_order_relaxed);
    failure_text_ = "connect to " + e.id + " at " + e.address + " failed: " + ec.message();
    DropUpstream();
    if (!c_.client.socket().is_open()) co_return AttemptEnd::kAbort;  // cut meanwhile (shutdown)
    co_return AttemptEnd::kRetry;  // nothing was sent: always safe to try another instance
  }
  {
    // Asio leaves EPOLLOUT registered after a connect, so every ACK the instance sent would wake
    // the reactor for nothing for as long as the connection is pooled: register the descriptor
    // again, for reading only (two epoll_ctl calls per upstream connection, not per request).
    tcp::socket& socket = c_.upstream->socket();
    const int fd = socket.release(ec);
    if (!ec) ec = drover::net::Adopt(socket, to->protocol(), fd);
    if (ec) {
      failure_text_ = "connect to " + e.id + " at " + e.address + " failed: " + ec.message();
      DropUpstream();
      co_return AttemptEnd::kRetry;
    }
  }
  drover::net::SetKeepAlive(c_.upstream->socket());
  drover::net::MarkNonBlocking(c_.upstream->socket());  // writes are tried at once (Relay::Push)
  t.retire_at = c_.pool.RetireAt(s_.clock.Now());
  s_.counters.upstream_connects.fetch_add(1, std::memory_order_relaxed);
  t.counters.connections.fetch_add(1, std::memory_order_relaxed);
  co_return AttemptEnd::kDone;
}

net::awaitable<HttpExchange::AttemptEnd> HttpExchange::SendRequest() {
  expect_continue_ = false;
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  error_code ec;
  c_.client.expires_after(s_.config.idle_timeout);
  co_await net::async_write(c_.client, net::buffer(kContinue),
                            net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    DropUpstream();
    co_return AttemptEnd::kAbort;
  }
  co_return co_await FinishRequest(StartRequest());
}

void HttpExchange::StartRequestRelay() {
  // The head and the body, together where they fit: a request without a body is one write.
  x_.relay.Start(x_.request_head, x_.request_body, x_.client_in,
                 x_.request.framing == Framing::kChunked);
}

RelayEnd HttpExchange::StartRequest() {
  StartRequestRelay();
  return x_.relay.Push(c_.upstream->socket());
}

net::awaitable<RelayEnd> HttpExchange::PushAtTurnEnd(drover::net::TurnSends& turn,
                                                     tcp::socket& socket) {
  const long sent = co_await turn.Send(socket, x_.relay.Next());
  if (sent == -EAGAIN) co_return RelayEnd::kWrite;
  if (sent < 0 && sent != drover::net::TurnSends::kNotSent) co_return RelayEnd::kWriteFailed;
  if (sent > 0) x_.relay.Wrote(static_cast<std::size_t>(sent));
  co_return x_.relay.Push(socket);  // the rest, if any (kNotSent: all of it)
}

net::awaitable<HttpExchange::AttemptEnd> HttpExchange::FinishRequest(RelayEnd end) {
  if (end == RelayEnd::kRead || end == RelayEnd::kWrite) {
    end = co_await x_.relay.Finish(end, c_.client, *c_.upstream, s_.config.idle_timeout);
  }
  if (end == RelayEnd::kBadInput) {  // a broken body: the client hears why
    body_read_ = true;
    DropUpstream();
    s_.counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
    co_await s_.Reply(c_, 400, "bad request body: " + std::string(x_.request_body.error()), false);
    co_return AttemptEnd::kAbort;
  }
  co_return RequestEnd(end);
}

HttpExchange::AttemptEnd HttpExchange::RequestEnd(RelayEnd end) {
  body_read_ = body_read_ || x_.relay.taken();
  // Body bytes the decoder took but no write carried are still in the client's buffer: kept, the
  // connection would read them as its next request. Whatever answer follows, it closes.
  if (end != RelayEnd::kDone && x_.relay.taken()) client_keep_ = false;
  if (end == RelayEnd::kReadFailed) {  // the client left mid-body
    DropUpstream();
    return AttemptEnd::kAbort;
  }
  return end == RelayEnd::kDone ? AttemptEnd::kDone : AttemptEnd::kRetry;
}

net::awaitable<error_code> HttpExchange::ReadResponseHead() {
  beast::flat_buffer& in = x_.upstream_in;
  in.clear();
  http1::HeadParser parser(kMaxResponseHead);
  while (true) {
    if (in.size() > 0) {
      switch (parser.Response(View(in), head_, x_.response)) {
        case http1::ParseResult::kDone:
          if (x_.response.status == 101) {
            bad_head_ = "101 Switching Protocols to a request that asked for no upgrade";
            co_return kBadHead;
          }
          if (x_.response.status >= 200) {
            response_size_ = parser.size();
            co_return error_code{};
          }
          in.consume(parser.size());  // an interim answer: the final one follows
          parser.Reset();
          continue;
        case http1::ParseResult::kNeedMore:
          break;
        case http1::ParseResult::kBad:
        case http1::ParseResult::kTooLarge:
          bad_head_ = parser.error().empty() ? "a response head over 64 KiB" : parser.error();
          co_return kBadHead;
      }
    }
    error_code ec;
    const std::size_t want = std::max<std::size_t>(kFirstRead * 8, in.size());
    // The instance has only just been sent the request: its answer is not there yet, so the
    // first read is Asio's timed read, which waits for it through the reactor (Boost 1.74 tries
    // the socket once first when an earlier read took bytes: a read that finds nothing, kept
    // over a post before it, which cost more in p99 -- fourteenth pass). The rest of a head that
    // came in pieces usually is there: it is read at once (no turn of the loop); nothing there,
    // the socket is marked drained, so the wait queues with no system call.
    std::size_t n = 0;
    if (in.size() == 0) {
      ec = net::error::would_block;
    } else {
      n = drover::net::ReadSome(c_.upstream->socket(), in.prepare(want), ec);
    }
    if (ec == net::error::would_block) {
      c_.upstream->expires_after(route_->response_timeout);
      n = co_await c_.upstream->async_read_some(in.prepare(want),
                                                net::redirect_error(net::use_awaitable, ec));
    }
    in.commit(n);
    if (ec == net::error::eof && in.size() > 0) {
      bad_head_ = "the connection closed in the middle of the response head";
      co_return kBadHead;
    }
    if (ec) co_return ec;
  }
}

// No response head: a timeout is final (the instance may be working on it: never sent twice);
// other failures are retried when the request is idempotent and its body was not streamed yet.
HttpExchange::AttemptEnd HttpExchange::HeadFailed(const Target& t, const error_code& ec) {
  const router::Endpoint& e = t.endpoint;
  Failed(t);
  if (ec == beast::error::timeout) {
    s_.counters.response_timeouts.fetch_add(1, std::memory_order_relaxed);
    failure_ = 504;
    failure_text_ = e.id + " did not answer within " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       route_->response_timeout)
                                       .count()) +
                    " ms";
    return AttemptEnd::kFail;
  }
  failure_text_ = e.id + " at " + e.address + " failed before answering: ";
  failure_text_ += ec == kBadHead ? bad_head_ : ec.message();
  // It cannot have acted on a request it never got.
  return idempotent_ && !body_read_ ? AttemptEnd::kRetry : AttemptEnd::kFail;
}

void HttpExchange::StartResponse(Target& t) {
  const http1::Head& res = x_.response;
  upstream_->ReportConnect(*snapshot_, t.index, res.status < 500, s_.clock.Now());
  if (res.status >= 500) t.counters.failed_requests.fetch_add(1, std::memory_order_relaxed);
  const Framing framing = ClientFraming(res, version_);
  keep_ = KeepClient() && framing != Framing::kClose;
  WriteResponseHead(res, version_, framing, keep_, x_.response_head);
  x_.response_body.Start(res.framing, res.content_length);
  x_.upstream_in.consume(response_size_);  // the head's views are done with
  x_.relay.Start(x_.response_head, x_.response_body, x_.upstream_in, framing == Framing::kChunked);
}

HttpExchange::AttemptEnd HttpExchange::EndResponse(Target& t, RelayEnd end) {
  if (end != RelayEnd::kDone) {
    // Mid-response: the client already has the head, only closing tells it the rest is lost.
    if (end == RelayEnd::kReadFailed || end == RelayEnd::kBadInput) {
      Failed(t);
    } else {
      DropUpstream();
    }
    return AttemptEnd::kAbort;
  }
  Release(t, x_.response.keep_alive);
  return AttemptEnd::kDone;
}

void HttpExchange::Release(Target& t, bool upstream_keep) {
  if (upstream_keep && x_.upstream_in.size() == 0 && c_.upstream->socket().is_open()) {
    // A response without a body by rule: bytes its upstream sent anyway may come after it.
    const bool bodyless = x_.response.framing == Framing::kNone;
    c_.pool.Put(t.pool_key, c_.upstream->release_socket(), t.retire_at, s_.clock.Now(), bodyless);
  } else {
    c_.upstream->close();
  }
  c_.upstream = nullptr;
}

void HttpExchange::Failed(const Target& t) {
  t.counters.failed_requests.fetch_add(1, std::memory_order_relaxed);
  upstream_->ReportConnect(*snapshot_, t.index, false, s_.clock.Now());
  DropUpstream();
}

Result<std::unique_ptr<HttpProxy>> HttpProxy::Start(const Workers& workers,
                                                    const ListenerConfig& config,
                                                    std::vector<Upstream*> routes, Clock& clock) {
  if (routes.size() != config.routes.size() || routes.empty()) {
    return InvalidArgumentError("gateway " + config.name + ": one upstream per route is needed");
  }
  if (workers.empty()) return InvalidArgumentError("gateway " + config.name + ": no io threads");
  auto state = std::make_shared<State>(workers, config, std::move(routes), clock);
  for (std::size_t w = 0; w < workers.size(); ++w) {
    state->worker_views.push_back(state->per_worker[w]);
  }
  drover::net::ListenerOptions options;
  options.name = "gateway " + config.name;
  options.address = config.address;
  options.max_connections = config.max_connections;
  options.refusal = kBusy;
  options.keep_alive = true;      // keepalive probes and no-delay on every client connection
  options.watch_peer_end = true;  // (a parked client: see Park)
  // Accepted on every worker, each connection served on one (one thread per worker: a connection
  // needs no strand).
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<drover::net::TcpListener> listener,
                          drover::net::TcpListener::Start(
                              workers, std::move(options),
                              [state](tcp::socket socket, drover::net::Connection connection) {
                                state->Serve(std::move(socket), std::move(connection));
                              }));
  for (std::size_t w = 0; w < workers.size(); ++w) {
    net::co_spawn(workers[w]->get_executor(),
                  state->Sweep(state->per_worker[w], workers[w]->get_executor()), net::detached);
  }
  state->per_worker.clear();  // from here on owned on their workers
  return std::unique_ptr<HttpProxy>(new HttpProxy(std::move(state), std::move(listener)));
}

HttpProxy::HttpProxy(std::shared_ptr<State> state,
                     std::unique_ptr<drover::net::TcpListener> listener)
    : state_(std::move(state)), listener_(std::move(listener)) {}

HttpProxy::~HttpProxy() {
  StopAccepting();
  CloseAll();
}

std::uint16_t HttpProxy::port() const { return listener_->port(); }
const drover::net::ConnectionCounters& HttpProxy::connections() const {
  return listener_->counters();
}
const ListenerCounters& HttpProxy::counters() const { return state_->counters; }
UpstreamPool::Stats HttpProxy::pool_stats() const {
  UpstreamPool::Stats sum;
  for (const auto& view : state_->worker_views) {
    const std::shared_ptr<HttpWorker> worker = view.lock();
    if (!worker) continue;
    const UpstreamPool::Stats s = worker->pool.stats();
    sum.idle += s.idle;
    sum.reused += s.reused;
    sum.retired_age += s.retired_age;
    sum.retired_idle += s.retired_idle;
    sum.retired_closed += s.retired_closed;
    sum.overflow += s.overflow;
  }
  return sum;
}

void HttpProxy::StopAccepting() {
  state_->draining.store(true);
  listener_->StopAccepting();
}

void HttpProxy::CloseAll() { listener_->CloseAll(); }

}  // namespace drover::gateway
