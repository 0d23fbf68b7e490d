#include "gateway/http_proxy.h"

// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include <spdlog/spdlog.h>

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

// Streams the body of the message `parser` has read the head of, from `in` to `out` through
// `serializer` (built on the parser's message, head already written), one buffer at a time.
// `body_read` turns true once a byte of body was taken from `in`; `read_error` says why reading
// failed.
template <bool isRequest>
net::awaitable<RelayEnd> RelayBody(http::parser<isRequest, http::buffer_body>& parser,
                                   beast::flat_buffer& in_buffer, beast::tcp_stream& in,
                                   http::serializer<isRequest, http::buffer_body>& serializer,
                                   beast::tcp_stream& out, Duration idle, bool& body_read,
                                   error_code& read_error) {
  std::optional<RelayChunk> buf;  // borrowed once there is a body to move (relay_chunk.h)
  auto& body = parser.get().body();
  while (!serializer.is_done()) {
    error_code ec;
    if (!parser.is_done()) {
      if (!buf) buf.emplace();
      body.data = buf->data();
      body.size = buf->size();
      in.expires_after(idle);
      co_await http::async_read(in, in_buffer, parser, net::redirect_error(net::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        read_error = ec;
        co_return RelayEnd::kReadFailed;
      }
      body.size = buf->size() - body.size;
      body.data = buf->data();
      body.more = !parser.is_done();
      body_read = body_read || body.size > 0;
    } else {
      body.data = nullptr;
      body.size = 0;
      body.more = false;
    }
    out.expires_after(idle);
    co_await http::async_write(out, serializer, net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return RelayEnd::kWriteFailed;
  }
  co_return RelayEnd::kDone;
}

}  // namespace

// One client connection; touched only on its strand.
struct HttpConn {
  HttpConn(tcp::socket s, std::shared_ptr<UpstreamPool> p)
      : client(std::move(s)), pool_owner(std::move(p)), pool(*pool_owner) {}
  void CloseBoth() {
    Close(client);
    if (upstream) Close(*upstream);
  }

  beast::tcp_stream client;
  std::shared_ptr<UpstreamPool> pool_owner;
  UpstreamPool& pool;                         // its io thread's
  std::optional<beast::tcp_stream> upstream;  // the connection of the request in flight
  bool in_request = false;                    // between a request head and its response's end
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
      pools.push_back(std::make_shared<UpstreamPool>(
          UpstreamPool::Options{c.upstream_max_age, c.upstream_idle_timeout,
                                static_cast<std::size_t>(c.max_idle_per_instance)}));
    }
    for (std::size_t i = 0; i < config.routes.size(); ++i) route_order.push_back(i);
    std::sort(route_order.begin(), route_order.end(), [this](std::size_t a, std::size_t b) {
      return config.routes[a].prefix.size() > config.routes[b].prefix.size();
    });
  }

  net::awaitable<void> Sweep(std::shared_ptr<UpstreamPool> pool, net::any_io_executor executor);
  net::awaitable<void> Serve(tcp::socket client, drover::net::Connection connection);
  // The worker whose io_context `executor` belongs to.
  std::size_t WorkerOf(const net::any_io_executor& executor) const {
    const auto& context = net::query(executor, net::execution::context);
    for (std::size_t w = 0; w < workers.size(); ++w) {
      if (&context == workers[w]) return w;
    }
    return 0;
  }
  // One request/response; false when the client connection must close.
  net::awaitable<bool> Exchange(std::shared_ptr<HttpConn> c, beast::flat_buffer& buffer,
                                http::request_parser<http::buffer_body>& parser,
                                const std::string& client_ip);
  net::awaitable<void> Reply(std::shared_ptr<HttpConn> c, http::status status, std::string text,
                             bool keep_alive);
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
  // and connections: a pool's sockets belong to its worker's io_context and must go with it.
  std::vector<std::shared_ptr<UpstreamPool>> pools;
  std::vector<std::weak_ptr<UpstreamPool>> pool_views;  // for stats
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

net::awaitable<void> HttpProxy::State::Sweep(std::shared_ptr<UpstreamPool> pool,
                                             net::any_io_executor executor) {
  auto self = shared_from_this();
  const Duration every = std::clamp<Duration>(
      config.upstream_idle_timeout / 2, std::chrono::milliseconds(10), std::chrono::seconds(1));
  net::steady_timer timer(executor);
  while (!draining.load(std::memory_order_relaxed)) {
    timer.expires_after(every);
    error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    pool->Sweep(clock.Now());
  }
  // Draining: the pool lives on in the connections still using it.
}

net::awaitable<void> HttpProxy::State::Reply(std::shared_ptr<HttpConn> c, http::status status,
                                             std::string text, bool keep_alive) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.keep_alive(keep_alive);
  res.body() = std::move(text);
  res.body() += '\n';
  res.prepare_payload();
  c->client.expires_after(config.idle_timeout);
  error_code ec;
  co_await http::async_write(c->client, res, net::redirect_error(net::use_awaitable, ec));
}

net::awaitable<void> HttpProxy::State::Serve(tcp::socket socket,
                                             drover::net::Connection connection) {
  auto self = shared_from_this();
  drover::net::SetKeepAlive(socket);
  error_code ec;
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  const std::string client_ip = ec ? std::string() : remote.address().to_string();
  std::shared_ptr<UpstreamPool> pool = pool_views[WorkerOf(socket.get_executor())].lock();
  if (!pool) co_return;  // its worker is shutting down
  auto c = std::make_shared<HttpConn>(std::move(socket), std::move(pool));
  // Draining: keep-alive connections waiting for their next request close now; the others get
  // "Connection: close" on their response.
  connection.OnClose([c](drover::net::CloseReason reason) {
    if (reason == drover::net::CloseReason::kCloseNow) {
      c->CloseBoth();
    } else if (!c->in_request) {
      Close(c->client);
    }
  });

  beast::flat_buffer buffer;
  while (!draining.load(std::memory_order_relaxed)) {
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(config.max_header_bytes));
    parser.body_limit(kNoLimit);  // streamed: no size is too large
    c->client.expires_after(config.idle_timeout);
    co_await http::async_read_header(c->client, buffer, parser,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == http::error::header_limit) {
        counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
        co_await Reply(
            c, http::status::request_header_fields_too_large,
            "request head larger than " + std::to_string(config.max_header_bytes) + " bytes",
            false);
      } else if (IsParseError(ec)) {
        counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
        co_await Reply(c, http::status::bad_request, "bad request: " + ec.message(), false);
      } else if (ec == beast::error::timeout && buffer.size() == 0) {
        counters.idle_timeouts.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    }
    c->in_request = true;
    counters.requests.fetch_add(1, std::memory_order_relaxed);
    const bool again = co_await Exchange(c, buffer, parser, client_ip);
    c->in_request = false;
    if (!again) break;
  }
  Close(c->client);
}

net::awaitable<bool> HttpProxy::State::Exchange(std::shared_ptr<HttpConn> c,
                                                beast::flat_buffer& buffer,
                                                http::request_parser<http::buffer_body>& parser,
                                                const std::string& client_ip) {
  auto& req = parser.get();
  const unsigned version = req.version();
  const std::string_view target = View(req.target());
  const std::string invalid = CheckRequestHead(req.base(), parser.chunked());
  if (!invalid.empty()) {
    counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
    co_await Reply(c, http::status::bad_request, "bad request: " + invalid, false);
    co_return false;
  }
  const std::string_view path = target.substr(0, target.find('?'));
  const std::optional<std::size_t> route = MatchRoute(path);
  if (!route) {
    counters.no_route.fetch_add(1, std::memory_order_relaxed);
    // An unread body would be taken for the next request: close instead.
    const bool keep = req.keep_alive() && parser.is_done();
    co_await Reply(c, http::status::not_found, "no route for " + std::string(path), keep);
    co_return keep;
  }
  const RouteConfig& rc = config.routes[*route];
  Upstream& upstream = *routes[*route];

  const bool client_keep = req.keep_alive();
  const bool has_body = !parser.is_done();
  const bool idempotent = Idempotent(req.method());
  const bool head = req.method() == http::verb::head;
  bool expect_continue = false;
  if (const auto it = req.find(http::field::expect); it != req.end()) {
    if (!beast::iequals(it->value(), "100-continue")) {
      co_await Reply(c, http::status::expectation_failed, "only 100-continue is supported", false);
      co_return false;
    }
    expect_continue = has_body;
    req.erase(http::field::expect);  // answered here: the upstream just gets the body
  }
  DropHopByHop(req);
  if (const auto [first, last] = req.equal_range(kForwardedFor); first == last) {
    req.set(kForwardedFor, client_ip);
  } else {
    std::string forwarded;
    for (auto f = first; f != last; ++f) forwarded.append(View(f->value())).append(", ");
    req.set(kForwardedFor, forwarded + client_ip);
  }
  req.version(11);  // no Connection header left: keep-alive to the upstream

  std::uint64_t key_hash = 0;
  if (rc.policy == Policy::kHash) {
    const auto it = req.find(rc.hash_header);
    key_hash = it != req.end() ? router::HashKey(View(it->value())) : ThreadRandom().Next();
  }

  budget.RequestStarted();
  struct RequestDone {
    RetryBudget& budget;
    ~RequestDone() { budget.RequestEnded(); }
  } request_done{budget};

  const std::shared_ptr<const UpstreamSnapshot> snapshot = upstream.Snapshot();
  std::vector<std::size_t>& tried = c->tried;
  tried.clear();
  bool body_read = false;
  http::status failure = http::status::bad_gateway;
  std::string failure_text;
  for (int attempt = 0; attempt <= rc.retries; ++attempt) {
    bool retry_slot = false;
    if (attempt > 0) {
      if (!budget.TryStartRetry()) {
        counters.budget_exhausted.fetch_add(1, std::memory_order_relaxed);
        failure_text += "; no retry: the retry budget is spent";
        break;
      }
      retry_slot = true;
      counters.retries.fetch_add(1, std::memory_order_relaxed);
    }
    struct RetryDone {
      RetryBudget& budget;
      bool held;
      ~RetryDone() {
        if (held) budget.RetryEnded();
      }
    } retry_done{budget, retry_slot};

    const Result<std::size_t> pick =
        upstream.Pick(*snapshot, key_hash, tried, clock.Now(), ThreadRandom());
    if (!pick.ok()) {
      if (tried.empty()) failure = http::status::service_unavailable;
      failure_text = pick.status().message() + (tried.empty() ? "" : "; " + failure_text);
      break;
    }
    tried.push_back(*pick);
    const router::Endpoint& e = snapshot->router->table->at(*pick);
    InstanceCounters& ic = *snapshot->counters[*pick];
    const std::string& pool_key = snapshot->pool_keys[*pick];
    const auto drop_upstream = [&] {
      if (c->upstream) Close(*c->upstream);
      c->upstream.reset();
    };
    const auto fail = [&] {  // the instance's fault: counts toward its ejection
      ic.failed_requests.fetch_add(1, std::memory_order_relaxed);
      upstream.ReportConnect(*snapshot, *pick, false, clock.Now());
      drop_upstream();
    };

    // A pooled connection, or a new one.
    error_code ec;
    MonoTime retire_at{};
    if (std::optional<tcp::socket> pooled = c->pool.Take(pool_key, clock.Now(), &retire_at)) {
      c->upstream.emplace(std::move(*pooled));
      counters.upstream_reused.fetch_add(1, std::memory_order_relaxed);
    } else {
      const auto to = drover::net::ParseEndpoint(e.address, "instance address");
      c->upstream.emplace(c->client.get_executor());
      c->upstream->expires_after(config.connect_timeout);
      if (to.ok()) {
        co_await c->upstream->async_connect(*to, net::redirect_error(net::use_awaitable, ec));
      } else {
        ec = net::error::invalid_argument;
      }
      if (ec) {
        // (A good connect is not reported: the answer is, and a 5xx streak must not reset.)
        upstream.ReportConnect(*snapshot, *pick, false, clock.Now());
        ic.connect_failures.fetch_add(1, std::memory_order_relaxed);
        failure_text = "connect to " + e.id + " at " + e.address + " failed: " + ec.message();
        drop_upstream();
        if (!c->client.socket().is_open()) co_return false;  // cut meanwhile (shutdown)
        continue;  // nothing was sent: always safe to try another instance
      }
      drover::net::SetKeepAlive(c->upstream->socket());
      retire_at = c->pool.RetireAt(clock.Now());
      counters.upstream_connects.fetch_add(1, std::memory_order_relaxed);
      ic.connections.fetch_add(1, std::memory_order_relaxed);
    }
    ic.requests.fetch_add(1, std::memory_order_relaxed);
    ic.active.fetch_add(1, std::memory_order_relaxed);
    struct InFlight {
      InstanceCounters& ic;
      ~InFlight() { ic.active.fetch_sub(1, std::memory_order_relaxed); }
    } in_flight{ic};

    // (After 100 Continue, if the client asked) the head and the body, together where they fit:
    // a request without a body is one write.
    http::request_serializer<http::buffer_body> request_out{req};
    if (expect_continue) {
      expect_continue = false;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      c->client.expires_after(config.idle_timeout);
      co_await net::async_write(c->client, net::buffer(kContinue),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        drop_upstream();
        co_return false;
      }
    }
    if (!ec) {
      error_code client_error;
      const RelayEnd end = co_await RelayBody(parser, buffer, c->client, request_out, *c->upstream,
                                              config.idle_timeout, body_read, client_error);
      if (end == RelayEnd::kReadFailed) {  // the client left mid-body, or sent a broken one
        drop_upstream();
        if (IsParseError(client_error)) {
          counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
          co_await Reply(c, http::status::bad_request,
                         "bad request body: " + client_error.message(), false);
        }
        co_return false;
      }
      if (end == RelayEnd::kWriteFailed) ec = net::error::connection_reset;
    }

    // Response head (interim 1xx answers skipped).
    beast::flat_buffer& upstream_buffer = c->upstream_buffer;
    upstream_buffer.clear();
    std::optional<http::response_parser<http::buffer_body>> response;
    while (!ec) {
      response.emplace();
      response->body_limit(kNoLimit);
      if (head) response->skip(true);
      c->upstream->expires_after(rc.response_timeout);
      co_await http::async_read_header(*c->upstream, upstream_buffer, *response,
                                       net::redirect_error(net::use_awaitable, ec));
      const unsigned status = ec ? 0 : response->get().result_int();
      if (status < 100 || status >= 200) break;
      if (status == 101) ec = net::error::operation_not_supported;  // Upgrade was not forwarded
    }
    if (ec) {
      const bool timeout = ec == beast::error::timeout;
      fail();
      if (timeout) {
        counters.response_timeouts.fetch_add(1, std::memory_order_relaxed);
        failure = http::status::gateway_timeout;
        failure_text = e.id + " did not answer within " +
                       std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          rc.response_timeout)
                                          .count()) +
                       " ms";
        break;  // it may be working on it: never sent twice
      }
      failure_text = e.id + " at " + e.address + " failed before answering: " + ec.message();
      if (idempotent && !body_read) continue;  // it cannot have acted on a request it never got
      break;
    }

    auto& res = response->get();
    const unsigned status = res.result_int();
    upstream.ReportConnect(*snapshot, *pick, status < 500, clock.Now());
    if (status >= 500) ic.failed_requests.fetch_add(1, std::memory_order_relaxed);
    const bool upstream_keep = !res.need_eof();
    const bool framed_by_close =
        !res.has_content_length() && !res.chunked() && !head && status != 204 && status != 304;
    bool keep = client_keep && parser.is_done() && !draining.load(std::memory_order_relaxed);
    DropHopByHop(res);
    if (framed_by_close) {
      if (version == 11) {
        res.chunked(true);
      } else {
        keep = false;  // HTTP/1.0 knows no chunks: the close frames it for the client too
      }
    }
    res.version(version);
    res.keep_alive(keep);
    http::response_serializer<http::buffer_body> response_out{res};
    bool response_read = false;
    error_code upstream_error;
    const RelayEnd end =
        co_await RelayBody(*response, upstream_buffer, *c->upstream, response_out, c->client,
                           config.idle_timeout, response_read, upstream_error);
    if (end != RelayEnd::kDone) {
      // Mid-response: the client already has the head, only closing tells it the rest is lost.
      if (end == RelayEnd::kReadFailed) {
        fail();
      } else {
        drop_upstream();
      }
      co_return false;
    }
    if (upstream_keep && upstream_buffer.size() == 0 && c->upstream->socket().is_open()) {
      c->pool.Put(pool_key, c->upstream->release_socket(), retire_at, clock.Now());
    } else {
      Close(*c->upstream);
    }
    c->upstream.reset();
    co_return keep;
  }

  counters.no_upstream.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("gateway {}: {} {}: {} {}", config.name, View(req.method_string()), path,
                static_cast<unsigned>(failure), failure_text);
  const bool keep = client_keep && parser.is_done() && !draining.load(std::memory_order_relaxed);
  co_await Reply(c, failure, failure_text, keep);
  co_return keep;
}

Result<std::unique_ptr<HttpProxy>> HttpProxy::Start(const Workers& workers,
                                                    const ListenerConfig& config,
                                                    std::vector<Upstream*> routes, Clock& clock) {
  if (routes.size() != config.routes.size() || routes.empty()) {
    return InvalidArgumentError("gateway " + config.name + ": one upstream per route is needed");
  }
  if (workers.empty()) return InvalidArgumentError("gateway " + config.name + ": no io threads");
  auto state = std::make_shared<State>(workers, config, std::move(routes), clock);
  for (std::size_t w = 0; w < workers.size(); ++w) state->pool_views.push_back(state->pools[w]);
  drover::net::ListenerOptions options;
  options.name = "gateway " + config.name;
  options.address = config.address;
  options.max_connections = config.max_connections;
  options.refusal = kBusy;
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
                  state->Sweep(state->pools[w], workers[w]->get_executor()), net::detached);
  }
  state->pools.clear();  // from here on owned on their workers
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
  for (const auto& view : state_->pool_views) {
    const std::shared_ptr<UpstreamPool> pool = view.lock();
    if (!pool) continue;
    const UpstreamPool::Stats s = pool->stats();
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
