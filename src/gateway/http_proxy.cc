#include "gateway/http_proxy.h"

// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <limits>

#include "drover/router.h"
#include "gateway/http_check.h"
#include "gateway/relay_chunk.h"
#include "gateway/retry_budget.h"
#include "gateway/thread_random.h"
#include "gateway/upstream.h"
#include "net/tcp_listener.h"

namespace drover::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {

// "No body limit": Boost 1.74's parser compares a Content-Length against an empty optional limit
// as if the limit were below every length, so the largest value stands for none.
constexpr std::uint64_t kNoLimit = std::numeric_limits<std::uint64_t>::max();
constexpr const char* kForwardedFor = "X-Forwarded-For";
// What a connection waiting for its next request reads at once (a typical request head).
constexpr std::size_t kFirstRead = 512;

std::string_view View(beast::string_view s) { return {s.data(), s.size()}; }

bool IsParseError(const error_code& ec) {
  return ec.category() == make_error_code(http::error::bad_method).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message;
}

// RFC 9110 9.2.2; a request whose body was not streamed yet can be sent again.
bool Idempotent(http::verb method) {
  switch (method) {
    case http::verb::get:
    case http::verb::head:
    case http::verb::options:
    case http::verb::trace:
    case http::verb::put:
    case http::verb::delete_:
      return true;
    default:
      return false;
  }
}

// A closed socket's error: the client vanished or the gateway cut it.
void Close(beast::tcp_stream& s) {
  error_code ec;
  s.socket().shutdown(tcp::socket::shutdown_both, ec);
  s.close();
}

enum class RelayEnd { kDone, kReadFailed, kWriteFailed };

// Feeds `parser` (in its body) what `input` holds, filling `body` as far as it has room; returns
// the bytes consumed. Stops when the body is complete, its buffer is full, or more input is needed.
template <bool isRequest>
std::size_t PutBody(http::parser<isRequest, http::buffer_body>& parser, net::const_buffer input,
                    error_code& ec) {
  std::size_t used = 0;
  while (!parser.is_done() && used < input.size()) {
    const std::size_t n = parser.put(input + used, ec);
    used += n;
    if (ec == http::error::need_buffer || ec == http::error::need_more) ec = {};
    if (ec || n == 0) break;
  }
  return used;
}

// Streams the body of the message `parser` has read the head of, from `in` to `out` through
// `serializer` (built on the parser's message, head not yet written), one 64 KiB chunk at a
// time: the parser decodes what `in_buffer` holds into a borrowed chunk (relay_chunk.h) and the
// serializer writes it (chunked stays chunked). Reads go straight to the socket in 64 KiB pieces,
// and only when nothing buffered is left to decode or write; the buffer gives the extra room
// back afterwards, so an idle connection keeps a small one. Bytes read past the message's end
// stay in `in_buffer`, in front of the next message. `body_read` turns true once a byte of body
// was taken from `in`; `read_error` says why reading failed.
template <bool isRequest>
net::awaitable<RelayEnd> RelayBody(http::parser<isRequest, http::buffer_body>& parser,
                                   beast::flat_buffer& in_buffer, beast::tcp_stream& in,
                                   http::serializer<isRequest, http::buffer_body>& serializer,
                                   beast::tcp_stream& out, Duration idle, bool& body_read,
                                   error_code& read_error) {
  constexpr std::size_t kKeptCapacity = 4096;
  std::optional<RelayChunk> chunk;  // borrowed once there is a body to move
  auto& body = parser.get().body();
  while (!serializer.is_done()) {
    error_code ec;
    body.data = nullptr;
    body.size = 0;
    body.more = false;
    if (!parser.is_done()) {
      if (!chunk) chunk.emplace();
      body.data = chunk->data();
      body.size = chunk->size();
      while (!parser.is_done() && body.size > 0) {
        const std::size_t room = body.size;
        if (in_buffer.size() > 0) in_buffer.consume(PutBody(parser, in_buffer.data(), ec));
        if (ec) {
          read_error = ec;
          co_return RelayEnd::kReadFailed;
        }
        body_read = body_read || body.size < room;
        if (parser.is_done() || body.size == 0) break;
        if (body.size < room && in_buffer.size() > 0) continue;  // more decodable input
        if (body.size < chunk->size()) break;  // something to write: write it before waiting
        in.expires_after(idle);
        const std::size_t n = co_await in.async_read_some(
            in_buffer.prepare(RelayChunk::kSize), net::redirect_error(net::use_awaitable, ec));
        in_buffer.commit(n);
        if (ec == net::error::eof) {
          ec = {};
          parser.put_eof(ec);  // ends a body framed by the close; else partial_message
        }
        if (ec) {
          read_error = ec;
          co_return RelayEnd::kReadFailed;
        }
      }
      body.size = chunk->size() - body.size;
      // (Nothing to write is no buffer: an empty one would go out as a chunk, "0\r\n\r\n", which
      // is the end of a chunked body.)
      body.data = body.size > 0 ? chunk->data() : nullptr;
      body.more = !parser.is_done();
    }
    // At once when the socket takes it all (the usual case, and no trip through the reactor:
    // both sockets are in non-blocking mode), else the rest when it can.
    http::write(out.socket(), serializer, ec);
    if (ec == net::error::would_block) {
      ec = {};
      out.expires_after(idle);
      co_await http::async_write(out, serializer, net::redirect_error(net::use_awaitable, ec));
    }
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return RelayEnd::kWriteFailed;
  }
  if (in_buffer.capacity() > kKeptCapacity) in_buffer.shrink_to_fit();
  co_return RelayEnd::kDone;
}

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

// What one worker thread keeps for the listener: its upstream connection pool and its idle
// clients. Owned by the worker's sweeper and the clients on it; a pool's sockets belong to the
// worker's io_context and must go with it.
struct HttpWorker {
  explicit HttpWorker(UpstreamPool::Options o) : pool(o) {}
  UpstreamPool pool;
  IdleClients idle;
};

// One client connection, for as long as it is open; touched only on its worker's thread. Between
// requests nothing else exists for it: no coroutine, parser or buffer, only this object (owned by
// the handler of its pending readiness wait) and the socket's reactor entry. A request takes the
// socket into an HttpConn and gives it back.
struct HttpClient {
  HttpClient(tcp::socket s, std::shared_ptr<HttpProxy::State> st, std::shared_ptr<HttpWorker> w,
             drover::net::Connection n, std::string ip)
      : socket(std::move(s)),
        state(std::move(st)),
        worker(std::move(w)),
        connection(std::move(n)),
        client_ip(std::move(ip)) {}
  ~HttpClient() {
    if (parked) worker->idle.Remove(*this);
  }

  tcp::socket socket;  // while waiting for a request; in `active`'s stream while one runs
  const std::shared_ptr<HttpProxy::State> state;
  const std::shared_ptr<HttpWorker> worker;
  drover::net::Connection connection;  // open (for the listener) while this lives
  const std::string client_ip;
  struct HttpConn* active = nullptr;  // the connection's requests, while they run
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
  HttpConn(tcp::socket s, UpstreamPool& p) : client(std::move(s)), pool(p) {}
  void CloseBoth() {
    Close(client);
    if (upstream) Close(*upstream);
  }

  beast::tcp_stream client;
  // The upstream connection of the request in flight. Made per request rather than kept: a
  // stream costs about 500 bytes.
  std::optional<beast::tcp_stream> upstream;
  UpstreamPool& pool;       // its io thread's
  bool in_request = false;  // between a request head and its response's end
  // Per request, kept here so that their storage is reused from one request to the next.
  beast::flat_buffer upstream_buffer;  // what was read from the upstream past the response head
  std::vector<std::size_t> tried;      // instances tried for the request in flight
};

struct HttpProxy::State : std::enable_shared_from_this<State> {
  State(const Workers& w, const ListenerConfig& c, std::vector<Upstream*> u, Clock& k)
      : workers(w),
        config(c),
        routes(std::move(u)),
        clock(k),
        budget(c.retry_budget_percent, c.retry_budget_min) {
    for (std::size_t i = 0; i < workers.size(); ++i) {
      per_worker.push_back(std::make_shared<HttpWorker>(
          UpstreamPool::Options{c.upstream_max_age, c.upstream_idle_timeout,
                                static_cast<std::size_t>(c.max_idle_per_instance)}));
    }
    for (std::size_t i = 0; i < config.routes.size(); ++i) route_order.push_back(i);
    std::sort(route_order.begin(), route_order.end(), [this](std::size_t a, std::size_t b) {
      return config.routes[a].prefix.size() > config.routes[b].prefix.size();
    });
  }

  // Per worker: closes pooled upstream connections past their idle time or age, and clients idle
  // past idle_timeout.
  net::awaitable<void> Sweep(std::shared_ptr<HttpWorker> worker, net::any_io_executor executor);
  net::awaitable<void> Serve(tcp::socket client, drover::net::Connection connection);
  // Serves the client's requests while it has bytes for one, then parks it (or closes it).
  net::awaitable<void> Active(std::shared_ptr<HttpClient> client);
  // Waits for the client's next request without a coroutine: a readiness wait whose handler
  // starts Active() again, and a place on its worker's idle list.
  void Park(std::shared_ptr<HttpClient> client);
  // One request from its head (what `buffer` holds first) to the end of its response; false
  // when the client connection must close.
  net::awaitable<bool> Request(HttpConn& c, beast::flat_buffer& buffer,
                               const std::string& client_ip);
  // The worker whose io_context `executor` belongs to.
  std::size_t WorkerOf(const net::any_io_executor& executor) const {
    const auto& context = net::query(executor, net::execution::context);
    for (std::size_t w = 0; w < workers.size(); ++w) {
      if (&context == workers[w]) return w;
    }
    return 0;
  }
  net::awaitable<void> Reply(HttpConn& c, http::status status, std::string text, bool keep_alive);
  std::optional<std::size_t> MatchRoute(std::string_view path) const {
    for (const std::size_t i : route_order) {
      if (path.starts_with(config.routes[i].prefix)) return i;
    }
    return std::nullopt;
  }

  const Workers workers;
  std::size_t next_worker = 0;  // on the listener's accept strand
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

// One request through the proxy, in the manner of Envoy's router: Prepare() checks and rewrites
// the head and finds the route; Run() then makes attempts, each on one instance, until one ends
// done or the retry policy (route.retries, the listener's RetryBudget, what was sent) says stop.
// An attempt is: TakePooled (else Connect), SendRequest (100 Continue, head and body),
// ReadResponseHead, RelayResponse, Release (back to the pool), and ends done, retry, fail or
// abort. The pieces that need no I/O (Prepare, StartRetry, TakePooled, HeadFailed, Release) are
// plain functions, not coroutines.
class HttpExchange {
 public:
  HttpExchange(HttpProxy::State& s, HttpConn& c, beast::flat_buffer& buffer,
               http::request_parser<http::buffer_body>& parser, const std::string& client_ip)
      : s_(s), c_(c), buffer_(buffer), parser_(parser), client_ip_(client_ip) {}

  // False when the client connection must close.
  net::awaitable<bool> Run();

 private:
  enum class AttemptEnd {
    kDone,   // the response was relayed (keep_ says whether the client connection stays)
    kRetry,  // failed where the instance cannot have acted on the request: try another
    kFail,   // failed: answer failure_ / failure_text_ to the client
    kAbort,  // the client connection is gone or holds part of a response: close it, no answer
  };
  struct Reject {
    http::status status;
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

  std::optional<Reject> Prepare();
  // Claims a retry slot before every attempt after the first; false when the budget is spent.
  bool StartRetry();
  net::awaitable<AttemptEnd> Attempt(std::size_t pick);
  bool TakePooled(Target& t, bool check_closed);
  net::awaitable<AttemptEnd> Connect(Target& t);
  net::awaitable<AttemptEnd> SendRequest();
  net::awaitable<error_code> ReadResponseHead(
      std::optional<http::response_parser<http::buffer_body>>& response);
  AttemptEnd HeadFailed(const Target& t, const error_code& ec);
  net::awaitable<AttemptEnd> RelayResponse(Target& t,
                                           http::response_parser<http::buffer_body>& response);
  void Release(Target& t, bool upstream_keep);
  // The instance's fault: counts toward its ejection.
  void Failed(const Target& t);
  void DropUpstream() {
    if (c_.upstream) Close(*c_.upstream);
    c_.upstream.reset();
  }
  bool KeepClient() const {
    return client_keep_ && parser_.is_done() && !s_.draining.load(std::memory_order_relaxed);
  }

  HttpProxy::State& s_;
  HttpConn& c_;
  beast::flat_buffer& buffer_;
  http::request_parser<http::buffer_body>& parser_;
  const std::string& client_ip_;

  // Set by Prepare().
  unsigned version_ = 11;
  std::string_view path_;
  const RouteConfig* route_ = nullptr;
  Upstream* upstream_ = nullptr;
  bool client_keep_ = false;
  bool idempotent_ = false;
  bool head_ = false;
  bool expect_continue_ = false;
  std::uint64_t key_hash_ = 0;
  // Across attempts.
  std::shared_ptr<const UpstreamSnapshot> snapshot_;
  bool body_read_ = false;  // a byte of the request body was taken from the client
  http::status failure_ = http::status::bad_gateway;
  std::string failure_text_;
  bool keep_ = false;  // after kDone: the client connection stays
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
      idle->socket.shutdown(tcp::socket::shutdown_both, ignored);
      idle->socket.close(ignored);
      counters.idle_timeouts.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Draining: the pool lives on in the connections still using it; the idle clients were closed
  // by their closers.
}

net::awaitable<void> HttpProxy::State::Reply(HttpConn& c, http::status status, std::string text,
                                             bool keep_alive) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.keep_alive(keep_alive);
  res.body() = std::move(text);
  res.body() += '\n';
  res.prepare_payload();
  c.client.expires_after(config.idle_timeout);
  error_code ec;
  co_await http::async_write(c.client, res, net::redirect_error(net::use_awaitable, ec));
}

net::awaitable<void> HttpProxy::State::Serve(tcp::socket socket,
                                             drover::net::Connection connection) {
  std::string client_ip = connection.peer().address().to_string();
  std::shared_ptr<HttpWorker> worker = worker_views[WorkerOf(socket.get_executor())].lock();
  if (!worker) co_return;                // its worker is shutting down
  drover::net::MarkNonBlocking(socket);  // reads and writes are tried at once (Active, RelayBody)
  auto client =
      std::make_shared<HttpClient>(std::move(socket), shared_from_this(), std::move(worker),
                                   std::move(connection), std::move(client_ip));
  // Draining: keep-alive connections waiting for their next request close now; the others get
  // "Connection: close" on their response.
  client->connection.OnClose(
      [weak = std::weak_ptr<HttpClient>(client)](drover::net::CloseReason reason) {
        const std::shared_ptr<HttpClient> c = weak.lock();
        if (!c) return;
        if (c->active == nullptr) {  // parked: its wait ends and its handler lets go of it
          error_code ignored;
          c->socket.shutdown(tcp::socket::shutdown_both, ignored);
          c->socket.close(ignored);
        } else if (reason == drover::net::CloseReason::kCloseNow) {
          c->active->CloseBoth();
        } else if (!c->active->in_request) {
          Close(c->active->client);
        }
      });
  co_await Active(std::move(client));
}

net::awaitable<void> HttpProxy::State::Active(std::shared_ptr<HttpClient> client) {
  HttpConn c(std::move(client->socket), client->worker->pool);
  client->active = &c;
  beast::flat_buffer buffer;
  bool keep = true;
  bool idle = false;
  // Woken by readiness (or just accepted): the request is usually there. After a response the
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
    keep = co_await Request(c, buffer, client->client_ip);
  }
  client->active = nullptr;
  if (idle && c.client.socket().is_open() && !draining.load(std::memory_order_relaxed)) {
    client->socket = c.client.release_socket();
    Park(std::move(client));
  } else {
    Close(c.client);
  }
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
    const net::any_io_executor executor = client->socket.get_executor();
    HttpProxy::State& state = *client->state;
    net::co_spawn(executor, state.Active(std::move(client)), net::detached);
  });
}

net::awaitable<bool> HttpProxy::State::Request(HttpConn& c, beast::flat_buffer& buffer,
                                               const std::string& client_ip) {
  http::request_parser<http::buffer_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(config.max_header_bytes));
  parser.body_limit(kNoLimit);  // streamed: no size is too large
  // The head from what was read, when it is all there (the usual case: no more I/O); else the
  // rest is read.
  error_code ec;
  buffer.consume(parser.put(buffer.data(), ec));
  if (ec == http::error::need_more) {
    ec = {};
    c.client.expires_after(config.idle_timeout);
    co_await http::async_read_header(c.client, buffer, parser,
                                     net::redirect_error(net::use_awaitable, ec));
  }
  if (ec) {
    if (ec == http::error::header_limit) {
      counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
      co_await Reply(
          c, http::status::request_header_fields_too_large,
          "request head larger than " + std::to_string(config.max_header_bytes) + " bytes", false);
    } else if (IsParseError(ec)) {
      counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
      co_await Reply(c, http::status::bad_request, "bad request: " + ec.message(), false);
    }
    co_return false;
  }
  c.in_request = true;
  counters.requests.fetch_add(1, std::memory_order_relaxed);
  const bool again = co_await HttpExchange(*this, c, buffer, parser, client_ip).Run();
  c.in_request = false;
  co_return again;
}

std::optional<HttpExchange::Reject> HttpExchange::Prepare() {
  auto& req = parser_.get();
  version_ = req.version();
  const std::string_view target = View(req.target());
  std::string invalid = CheckRequestHead(req.base(), parser_.chunked());
  if (!invalid.empty()) {
    s_.counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
    return Reject{http::status::bad_request, "bad request: " + std::move(invalid), false};
  }
  path_ = target.substr(0, target.find('?'));
  const std::optional<std::size_t> route = s_.MatchRoute(path_);
  if (!route) {
    s_.counters.no_route.fetch_add(1, std::memory_order_relaxed);
    // An unread body would be taken for the next request: close instead.
    return Reject{http::status::not_found, "no route for " + std::string(path_),
                  req.keep_alive() && parser_.is_done()};
  }
  route_ = &s_.config.routes[*route];
  upstream_ = s_.routes[*route];

  client_keep_ = req.keep_alive();
  idempotent_ = Idempotent(req.method());
  head_ = req.method() == http::verb::head;
  if (const auto it = req.find(http::field::expect); it != req.end()) {
    if (!beast::iequals(it->value(), "100-continue")) {
      return Reject{http::status::expectation_failed, "only 100-continue is supported", false};
    }
    expect_continue_ = !parser_.is_done();
    req.erase(http::field::expect);  // answered here: the upstream just gets the body
  }
  DropHopByHop(req);
  if (const auto [first, last] = req.equal_range(kForwardedFor); first == last) {
    req.set(kForwardedFor, client_ip_);
  } else {
    std::string forwarded;
    for (auto f = first; f != last; ++f) forwarded.append(View(f->value())).append(", ");
    req.set(kForwardedFor, forwarded + client_ip_);
  }
  req.version(11);  // no Connection header left: keep-alive to the upstream

  if (route_->policy == Policy::kHash) {
    const auto it = req.find(route_->hash_header);
    key_hash_ = it != req.end() ? router::HashKey(View(it->value())) : ThreadRandom().Next();
  }
  return std::nullopt;
}

net::awaitable<bool> HttpExchange::Run() {
  if (std::optional<Reject> reject = Prepare()) {
    co_await s_.Reply(c_, reject->status, std::move(reject->text), reject->keep);
    co_return reject->keep;
  }
  RetryBudget& budget = s_.budget;
  budget.RequestStarted();
  struct RequestDone {
    RetryBudget& budget;
    ~RequestDone() { budget.RequestEnded(); }
  } request_done{budget};

  snapshot_ = upstream_->Snapshot();
  c_.tried.clear();
  for (int attempt = 0; attempt <= route_->retries; ++attempt) {
    if (attempt > 0 && !StartRetry()) break;
    struct RetryDone {
      RetryBudget& budget;
      bool held;
      ~RetryDone() {
        if (held) budget.RetryEnded();
      }
    } retry_done{budget, attempt > 0};

    const Result<std::size_t> pick =
        upstream_->Pick(*snapshot_, key_hash_, c_.tried, s_.clock.Now(), ThreadRandom());
    if (!pick.ok()) {
      if (c_.tried.empty()) failure_ = http::status::service_unavailable;
      failure_text_ = pick.status().message() + (c_.tried.empty() ? "" : "; " + failure_text_);
      break;
    }
    c_.tried.push_back(*pick);
    const AttemptEnd end = co_await Attempt(*pick);
    if (end == AttemptEnd::kDone) co_return keep_;
    if (end == AttemptEnd::kAbort) co_return false;
    if (end == AttemptEnd::kFail) break;
  }

  s_.counters.no_upstream.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("gateway {}: {} {}: {} {}", s_.config.name, View(parser_.get().method_string()),
                path_, static_cast<unsigned>(failure_), failure_text_);
  const bool keep = KeepClient();
  co_await s_.Reply(c_, failure_, failure_text_, keep);
  co_return keep;
}

bool HttpExchange::StartRetry() {
  if (!s_.budget.TryStartRetry()) {
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
  bool unchecked = idempotent_ && parser_.is_done() && !expect_continue_;
  InstanceCounters* counted = nullptr;  // once the request went to the instance
  struct InFlight {
    InstanceCounters*& ic;
    ~InFlight() {
      if (ic) ic->active.fetch_sub(1, std::memory_order_relaxed);
    }
  } in_flight{counted};
  std::optional<http::response_parser<http::buffer_body>> response;
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
    const AttemptEnd sent = co_await SendRequest();
    if (sent == AttemptEnd::kAbort) co_return sent;
    ec = sent == AttemptEnd::kDone ? co_await ReadResponseHead(response)
                                   : error_code(net::error::connection_reset);
    // (A failed write arrives here as connection_reset.)
    const bool closed_before_answer =
        ec == http::error::end_of_stream || ec == net::error::connection_reset;
    if (!unchecked || !closed_before_answer || c_.upstream_buffer.size() > 0) break;
    c_.pool.FoundClosed();
    DropUpstream();
    unchecked = false;
  }
  if (ec) co_return HeadFailed(t, ec);
  co_return co_await RelayResponse(t, *response);
}

bool HttpExchange::TakePooled(Target& t, bool check_closed) {
  std::optional<tcp::socket> pooled =
      c_.pool.Take(t.pool_key, s_.clock.Now(), &t.retire_at, check_closed);
  if (!pooled) return false;
  c_.upstream.emplace(std::move(*pooled));
  s_.counters.upstream_reused.fetch_add(1, std::memory_order_relaxed);
  return true;
}

net::awaitable<HttpExchange::AttemptEnd> HttpExchange::Connect(Target& t) {
  const router::Endpoint& e = t.endpoint;
  error_code ec;
  const auto to = drover::net::ParseEndpoint(e.address, "instance address");
  c_.upstream.emplace(c_.client.get_executor());
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
  drover::net::MarkNonBlocking(c_.upstream->socket());  // writes are tried at once (RelayBody)
  t.retire_at = c_.pool.RetireAt(s_.clock.Now());
  s_.counters.upstream_connects.fetch_add(1, std::memory_order_relaxed);
  t.counters.connections.fetch_add(1, std::memory_order_relaxed);
  co_return AttemptEnd::kDone;
}

// kDone: sent; kRetry: the upstream failed while taking it (the caller reads no answer);
// kAbort: the client failed (left, or sent a broken body, answered 400 here).
net::awaitable<HttpExchange::AttemptEnd> HttpExchange::SendRequest() {
  // (After 100 Continue, if the client asked) the head and the body, together where they fit:
  // a request without a body is one write.
  http::request_serializer<http::buffer_body> out{parser_.get()};
  if (expect_continue_) {
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
  }
  error_code client_error;
  const RelayEnd end = co_await RelayBody(parser_, buffer_, c_.client, out, *c_.upstream,
                                          s_.config.idle_timeout, body_read_, client_error);
  if (end == RelayEnd::kReadFailed) {  // the client left mid-body, or sent a broken one
    DropUpstream();
    if (IsParseError(client_error)) {
      s_.counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
      co_await s_.Reply(c_, http::status::bad_request,
                        "bad request body: " + client_error.message(), false);
    }
    co_return AttemptEnd::kAbort;
  }
  co_return end == RelayEnd::kDone ? AttemptEnd::kDone : AttemptEnd::kRetry;
}

// The response head, interim 1xx answers skipped.
net::awaitable<error_code> HttpExchange::ReadResponseHead(
    std::optional<http::response_parser<http::buffer_body>>& response) {
  c_.upstream_buffer.clear();
  // The instance has only just been sent the request: reading now would answer EAGAIN (a system
  // call) and then wait. Let the worker serve what else is ready first (a post: no system call);
  // under load the answer has come by then and one read takes it. Idle, the post costs a turn
  // of the loop.
  co_await net::post(c_.upstream->get_executor(), net::use_awaitable);
  error_code ec;
  while (!ec) {
    response.emplace();
    response->body_limit(kNoLimit);
    if (head_) response->skip(true);
    c_.upstream->expires_after(route_->response_timeout);
    co_await http::async_read_header(*c_.upstream, c_.upstream_buffer, *response,
                                     net::redirect_error(net::use_awaitable, ec));
    const unsigned status = ec ? 0 : response->get().result_int();
    if (status < 100 || status >= 200) break;
    if (status == 101) ec = net::error::operation_not_supported;  // Upgrade was not forwarded
  }
  co_return ec;
}

// No response head: a timeout is final (the instance may be working on it: never sent twice);
// other failures are retried when the request is idempotent and its body was not streamed yet.
HttpExchange::AttemptEnd HttpExchange::HeadFailed(const Target& t, const error_code& ec) {
  const router::Endpoint& e = t.endpoint;
  Failed(t);
  if (ec == beast::error::timeout) {
    s_.counters.response_timeouts.fetch_add(1, std::memory_order_relaxed);
    failure_ = http::status::gateway_timeout;
    failure_text_ = e.id + " did not answer within " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       route_->response_timeout)
                                       .count()) +
                    " ms";
    return AttemptEnd::kFail;
  }
  failure_text_ = e.id + " at " + e.address + " failed before answering: " + ec.message();
  // It cannot have acted on a request it never got.
  return idempotent_ && !body_read_ ? AttemptEnd::kRetry : AttemptEnd::kFail;
}

net::awaitable<HttpExchange::AttemptEnd> HttpExchange::RelayResponse(
    Target& t, http::response_parser<http::buffer_body>& response) {
  auto& res = response.get();
  const unsigned status = res.result_int();
  upstream_->ReportConnect(*snapshot_, t.index, status < 500, s_.clock.Now());
  if (status >= 500) t.counters.failed_requests.fetch_add(1, std::memory_order_relaxed);
  const bool upstream_keep = !res.need_eof();
  const bool framed_by_close =
      !res.has_content_length() && !res.chunked() && !head_ && status != 204 && status != 304;
  keep_ = KeepClient();
  DropHopByHop(res);
  if (framed_by_close) {
    if (version_ == 11) {
      res.chunked(true);
    } else {
      keep_ = false;  // HTTP/1.0 knows no chunks: the close frames it for the client too
    }
  }
  res.version(version_);
  res.keep_alive(keep_);
  http::response_serializer<http::buffer_body> out{res};
  bool response_read = false;
  error_code upstream_error;
  const RelayEnd end =
      co_await RelayBody(response, c_.upstream_buffer, *c_.upstream, out, c_.client,
                         s_.config.idle_timeout, response_read, upstream_error);
  if (end != RelayEnd::kDone) {
    // Mid-response: the client already has the head, only closing tells it the rest is lost.
    if (end == RelayEnd::kReadFailed) {
      Failed(t);
    } else {
      DropUpstream();
    }
    co_return AttemptEnd::kAbort;
  }
  Release(t, upstream_keep);
  co_return AttemptEnd::kDone;
}

void HttpExchange::Release(Target& t, bool upstream_keep) {
  if (upstream_keep && c_.upstream_buffer.size() == 0 && c_.upstream->socket().is_open()) {
    c_.pool.Put(t.pool_key, c_.upstream->release_socket(), t.retire_at, s_.clock.Now());
  } else {
    Close(*c_.upstream);
  }
  c_.upstream.reset();
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
  options.keep_alive = true;  // keepalive probes and no-delay on every client connection
  // One thread per worker: a connection needs no strand.
  DROVER_ASSIGN_OR_RETURN(
      std::unique_ptr<drover::net::TcpListener> listener,
      drover::net::TcpListener::Start(
          *workers[0], std::move(options),
          [raw = state.get()] {
            return net::any_io_executor(
                raw->workers[raw->next_worker++ % raw->workers.size()]->get_executor());
          },
          [state](tcp::socket socket, drover::net::Connection connection) {
            return state->Serve(std::move(socket), std::move(connection));
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
