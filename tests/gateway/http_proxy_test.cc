// HttpProxy over real loopback sockets, with HttpBackend upstreams and hand-made routing tables:
// routing, header rules, retries and their budget, pooled connections (max age, idle timeout),
// streamed bodies, timeouts, ejection, and a table of malformed requests.
// clang-format off
#include "testing/http_backend.h"  // first: it includes <utility> before Asio
// clang-format on

#include "gateway/http_proxy.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <future>
#include <set>
#include <thread>

#include "gateway/retry_budget.h"
#include "gateway/upstream.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"

namespace drover::gateway {
namespace {

using namespace std::chrono_literals;
namespace net = boost::asio;
namespace http = boost::beast::http;
using testing::Eventually;
using testing::HttpBackend;

router::Endpoint EndpointOf(const std::string& id, const std::string& address,
                            router::EndpointState state = router::EndpointState::kReady) {
  router::Endpoint e;
  e.id = id;
  e.address = address;
  e.state = state;
  return e;
}

struct Reply {
  int status = 0;  // 0: the connection failed or closed
  std::string body;
  std::string instance;
  std::string conn;
  bool chunked = false;
  bool keep_alive = false;
};

// A keep-alive client: requests on one connection until the server closes it.
class Client {
 public:
  explicit Client(std::uint16_t port) : socket_(io_) {
    boost::system::error_code ec;
    socket_.connect({net::ip::make_address("127.0.0.1"), port}, ec);
    const timeval timeout{10, 0};
    ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  Reply Send(http::verb method, const std::string& target, const std::string& body = {},
             std::vector<std::pair<std::string, std::string>> headers = {}) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "gateway.test");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    boost::system::error_code ec;
    http::write(socket_, req, ec);
    return ec ? Reply{} : Read(method == http::verb::head);
  }
  Reply SendRaw(const std::string& raw) {
    boost::system::error_code ec;
    net::write(socket_, net::buffer(raw), ec);
    return ec ? Reply{} : Read();
  }
  // `to_head`: the answer to a HEAD (a head alone, whatever its Content-Length says).
  Reply Read(bool to_head = false) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser.skip(to_head);
    boost::system::error_code ec;
    http::read(socket_, buffer_, parser, ec);
    if (ec) return {};
    const auto& res = parser.get();
    return {static_cast<int>(res.result_int()), res.body(),    std::string(res["X-Instance"]),
            std::string(res["X-Conn"]),         res.chunked(), res.keep_alive()};
  }
  // True when the server closed the connection.
  bool Closed() {
    char byte;
    boost::system::error_code ec;
    socket_.read_some(net::buffer(&byte, 1), ec);
    return static_cast<bool>(ec);
  }
  net::ip::tcp::socket& socket() { return socket_; }

 private:
  net::io_context io_;
  net::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

Reply Get(std::uint16_t port, const std::string& target) {
  return Client(port).Send(http::verb::get, target);
}

class HttpProxyTest : public ::testing::Test {
 protected:
  // The proxy with one route whose answers must come within `timeout`, in front of `only`.
  void StartBehindRouteTimeout(std::chrono::milliseconds timeout, HttpBackend& only) {
    ListenerConfig l;
    RouteConfig r;
    r.service = "svc";
    r.response_timeout = timeout;
    l.routes = {r};
    StartProxy(l);
    SetTable({EndpointOf(only.id, only.address())});
  }

  // One route per prefix, each to its own service; the listener's settings from `l`.
  void StartProxy(ListenerConfig l, std::vector<std::string> prefixes = {"/"}) {
    l.name = "web";
    l.protocol = Protocol::kHttp;
    l.address = "127.0.0.1:0";
    if (l.routes.empty()) {
      for (const std::string& p : prefixes) {
        RouteConfig r;
        r.prefix = p;
        r.service = "svc" + p;
        l.routes.push_back(r);
      }
    }
    std::vector<Upstream*> raw;
    for (const RouteConfig& r : l.routes) {
      upstreams_.push_back(Upstream::ForTables(RouteUpstreamConfig(l, r), clock_));
      raw.push_back(upstreams_.back().get());
    }
    // Two workers, one thread each, as in the gateway.
    proxy_ = HttpProxy::Start({&io0_, &io1_}, l, raw, clock_).value();
    for (net::io_context* io : ios_) threads_.emplace_back([io] { io->run(); });
  }
  void SetTable(std::vector<router::Endpoint> endpoints, std::size_t route = 0) {
    upstreams_[route]->Apply(
        router::RoutingTable::Create(++version_, std::move(endpoints)).value());
  }
  void TearDown() override {
    proxy_->StopAccepting();
    proxy_->CloseAll();
    EXPECT_TRUE(Eventually([&] { return proxy_->connections().active.load() == 0; }));
    work0_.reset();
    work1_.reset();
    for (net::io_context* io : ios_) io->stop();
    for (auto& t : threads_) t.join();
    proxy_.reset();
  }
  std::uint16_t port() const { return proxy_->port(); }
  const ListenerCounters& counters() const { return proxy_->counters(); }
  const InstanceCounters& CountersOf(const std::string& id, std::size_t route = 0) const {
    const auto snapshot = upstreams_[route]->Snapshot();
    return *snapshot->counters[*snapshot->router->table->IndexOf(id)];
  }

  RealClock clock_;
  net::io_context io0_{1}, io1_{1};
  net::io_context* ios_[2] = {&io0_, &io1_};
  net::executor_work_guard<net::io_context::executor_type> work0_{io0_.get_executor()};
  net::executor_work_guard<net::io_context::executor_type> work1_{io1_.get_executor()};
  std::vector<std::unique_ptr<Upstream>> upstreams_;
  std::unique_ptr<HttpProxy> proxy_;
  std::vector<std::thread> threads_;
  std::uint64_t version_ = 0;
};

TEST_F(HttpProxyTest, ForwardsWithXForwardedForAndWithoutHopByHopHeaders) {
  HttpBackend a("a");
  StartProxy({});
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  const Reply r = client.Send(http::verb::get, "/headers", "",
                              {{"Connection", "keep-alive, X-Secret"},
                               {"X-Secret", "1"},
                               {"Keep-Alive", "timeout=5"},
                               {"TE", "trailers"},
                               {"Proxy-Connection", "keep-alive"},
                               {"X-Forwarded-For", "10.0.0.1"},
                               {"X-Kept", "yes"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.instance, "a");
  EXPECT_NE(r.body.find("X-Forwarded-For: 10.0.0.1, 127.0.0.1\n"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("X-Kept: yes\n"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("Host: gateway.test\n"), std::string::npos) << r.body;
  for (const char* dropped : {"X-Secret", "Keep-Alive", "TE:", "Proxy-Connection", "Connection"}) {
    EXPECT_EQ(r.body.find(dropped), std::string::npos) << dropped << " in\n" << r.body;
  }
  EXPECT_TRUE(r.keep_alive);
  // The client's keep-alive connection and the pooled upstream connection both serve again.
  const Reply again = client.Send(http::verb::get, "/x");
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.conn, r.conn);
  EXPECT_EQ(a.connections.load(), 1);
}

TEST_F(HttpProxyTest, RoutesByLongestPrefixAndAnswers404ForNoRoute) {
  HttpBackend api("api"), v2("v2");
  StartProxy({}, {"/api/", "/api/v2/", "/static"});
  SetTable({EndpointOf("api", api.address())}, 0);
  SetTable({EndpointOf("v2", v2.address())}, 1);
  Client client(port());
  EXPECT_EQ(client.Send(http::verb::get, "/api/users").instance, "api");
  EXPECT_EQ(client.Send(http::verb::get, "/api/v2/users?x=/api/").instance, "v2");
  const Reply none = client.Send(http::verb::get, "/other");
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(none.body, "no route for /other\n");
  // An empty route: 503, not a hang.
  const Reply empty = client.Send(http::verb::get, "/static/x.css");
  EXPECT_EQ(empty.status, 503);
  EXPECT_NE(empty.body.find("no routable instance of 'svc/static'"), std::string::npos)
      << empty.body;
  EXPECT_EQ(client.Send(http::verb::get, "/api/again").status, 200);  // the connection lives on
  EXPECT_EQ(counters().no_route.load(), 1u);
}

TEST_F(HttpProxyTest, HashRoutesAKeyToOneInstance) {
  HttpBackend a("a"), b("b"), c("c");
  ListenerConfig l;
  RouteConfig r;
  r.service = "shards";
  r.policy = Policy::kHash;
  l.routes = {r};
  StartProxy(l);
  SetTable(
      {EndpointOf("a", a.address()), EndpointOf("b", b.address()), EndpointOf("c", c.address())});
  // One keep-alive connection: each request ends (and leaves its instance's active count) before
  // the next is read, so bounded load never has a reason to spill a key. Requests from separate
  // connections could overlap the previous one's bookkeeping on another io thread.
  Client client(port());
  std::set<std::string> owners_of_k1, all;
  for (int i = 0; i < 10; ++i) {
    owners_of_k1.insert(
        client.Send(http::verb::get, "/", "", {{"X-Route-Key", "player-17"}}).instance);
  }
  for (int i = 0; i < 60; ++i) {
    all.insert(
        client.Send(http::verb::get, "/", "", {{"X-Route-Key", "k" + std::to_string(i)}}).instance);
  }
  EXPECT_EQ(owners_of_k1.size(), 1u);
  EXPECT_EQ(all.size(), 3u);
}

TEST_F(HttpProxyTest, AFailedConnectIsRetriedOnAnotherInstanceForAnyMethod) {
  HttpBackend live("live");
  StartProxy({});
  SetTable(
      {EndpointOf("dead", testing::FreeLoopbackAddress()), EndpointOf("live", live.address())});
  for (int i = 0; i < 20; ++i) {
    const Reply r = Client(port()).Send(i % 2 ? http::verb::get : http::verb::post, "/echo",
                                        "payload " + std::to_string(i));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, "payload " + std::to_string(i));
  }
  EXPECT_GT(CountersOf("dead").connect_failures.load(), 0u);
  EXPECT_EQ(counters().retries.load(), CountersOf("dead").connect_failures.load());
  EXPECT_EQ(live.requests.load(), 20);
}

TEST_F(HttpProxyTest, OnlyIdempotentRequestsAreRetriedAfterTheUpstreamDropsThem) {
  HttpBackend flaky("flaky"), good("good");
  flaky.reset_requests = 1000;  // every request it gets: connection closed, no answer
  ListenerConfig l;
  l.eject_after_failures = 1000;  // keep it in rotation for the test
  StartProxy(l);
  SetTable({EndpointOf("flaky", flaky.address()), EndpointOf("good", good.address())});
  for (int i = 0; i < 20; ++i) {
    const Reply r = Get(port(), "/get");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.instance, "good");
  }
  int failed_posts = 0;
  for (int i = 0; i < 20; ++i) {
    const Reply r = Client(port()).Send(http::verb::post, "/post", "charge the card once");
    if (r.status == 502) {
      ++failed_posts;
      EXPECT_NE(r.body.find("flaky"), std::string::npos) << r.body;
    } else {
      EXPECT_EQ(r.status, 200);
    }
  }
  // p2c between two idle instances draws the flaky one about half the time; a POST it dropped
  // may have been acted on, so it is never sent again.
  EXPECT_GT(failed_posts, 0);
  const int gets_on_flaky = flaky.requests.load() - failed_posts;
  EXPECT_GT(gets_on_flaky, 0);
  EXPECT_EQ(counters().retries.load(), static_cast<std::uint64_t>(gets_on_flaky));
}

TEST(RetryBudgetTest, AllowsMinOrPercentOfActiveRequests) {
  RetryBudget budget(20, 3);
  EXPECT_EQ(budget.Allowed(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(budget.TryStartRetry());
  EXPECT_FALSE(budget.TryStartRetry());
  for (int i = 0; i < 100; ++i) budget.RequestStarted();
  EXPECT_EQ(budget.Allowed(), 20);
  for (int i = 3; i < 20; ++i) EXPECT_TRUE(budget.TryStartRetry());
  EXPECT_FALSE(budget.TryStartRetry());
  budget.RetryEnded();
  EXPECT_TRUE(budget.TryStartRetry());
  for (int i = 0; i < 100; ++i) budget.RequestEnded();
  EXPECT_FALSE(budget.TryStartRetry());  // 20 in flight, 3 allowed now
}

// The scoped forms both proxies use: a request counts while its Request lives; a Retry holds a
// slot from a successful Take until Release or its end, and never two.
TEST(RetryBudgetTest, ScopedRequestsAndRetriesGiveBackWhatTheyTook) {
  RetryBudget budget(50, 1);
  {
    std::vector<std::unique_ptr<RetryBudget::Request>> requests;
    for (int i = 0; i < 4; ++i) requests.push_back(std::make_unique<RetryBudget::Request>(budget));
    EXPECT_EQ(budget.requests(), 4);
    EXPECT_EQ(budget.Allowed(), 2);
    RetryBudget::Retry a(budget), b(budget), c(budget);
    EXPECT_TRUE(a.Take());
    EXPECT_TRUE(a.Take());  // still the one slot
    EXPECT_EQ(budget.retries_in_flight(), 1);
    EXPECT_TRUE(b.Take());
    EXPECT_FALSE(c.Take());
    EXPECT_FALSE(c.held());
    a.Release();
    a.Release();
    EXPECT_EQ(budget.retries_in_flight(), 1);
    EXPECT_TRUE(c.Take());
  }
  EXPECT_EQ(budget.requests(), 0);
  EXPECT_EQ(budget.retries_in_flight(), 0);
}

TEST_F(HttpProxyTest, ASpentRetryBudgetTurnsTheFailureIntoA502) {
  HttpBackend live("live");
  ListenerConfig l;
  l.retry_budget_min = 0;
  l.retry_budget_percent = 0;  // no retries at all
  l.eject_after_failures = 1000;
  StartProxy(l);
  SetTable(
      {EndpointOf("dead", testing::FreeLoopbackAddress()), EndpointOf("live", live.address())});
  int refused = 0;
  for (int i = 0; i < 40 && refused < 3; ++i) {
    const Reply r = Get(port(), "/");
    if (r.status == 200) continue;
    EXPECT_EQ(r.status, 502);
    EXPECT_NE(r.body.find("connect to dead at"), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("retry budget is spent"), std::string::npos) << r.body;
    ++refused;
  }
  EXPECT_EQ(refused, 3);
  EXPECT_EQ(counters().budget_exhausted.load(), 3u);
  EXPECT_EQ(counters().retries.load(), 0u);
}

TEST_F(HttpProxyTest, PooledConnectionsRotateAtTheirMaxAge) {
  HttpBackend a("a");
  ListenerConfig l;
  l.upstream_max_age = 300ms;
  StartProxy(l);
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  std::set<std::string> conns;
  const auto end = std::chrono::steady_clock::now() + 1500ms;
  int sent = 0;
  while (std::chrono::steady_clock::now() < end) {
    const Reply r = client.Send(http::verb::get, "/");
    ASSERT_EQ(r.status, 200);
    conns.insert(r.conn);
    ++sent;
    std::this_thread::sleep_for(30ms);
  }
  // Each connection lives 270..330 ms: 1.5 s of requests need at least 4 of them, and far fewer
  // than one per request.
  EXPECT_GE(conns.size(), 4u) << sent << " requests";
  EXPECT_LT(conns.size(), static_cast<std::size_t>(sent) / 3);
  EXPECT_GE(proxy_->pool_stats().retired_age, 3u);
}

TEST_F(HttpProxyTest, WithoutMaxAgeOneConnectionServesEverything) {
  HttpBackend a("a");
  ListenerConfig l;
  l.upstream_max_age = Duration::zero();
  StartProxy(l);
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  std::set<std::string> conns;
  for (int i = 0; i < 30; ++i) conns.insert(client.Send(http::verb::get, "/").conn);
  EXPECT_EQ(conns.size(), 1u);
}

TEST_F(HttpProxyTest, AnIdlePooledConnectionIsClosedAfterTheIdleTimeout) {
  HttpBackend a("a");
  ListenerConfig l;
  l.upstream_idle_timeout = 200ms;
  StartProxy(l);
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  const Reply first = client.Send(http::verb::get, "/");
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(a.closed.load(), 0);
  // The sweeper closes it: the backend sees the connection end without any new request.
  EXPECT_TRUE(Eventually([&] { return a.closed.load() == 1; }, 3s));
  EXPECT_EQ(proxy_->pool_stats().retired_idle, 1u);
  const Reply second = client.Send(http::verb::get, "/");
  EXPECT_EQ(second.status, 200);
  EXPECT_NE(second.conn, first.conn);
}

// An idle keep-alive client waits without a coroutine (parked on its worker's idle list); the
// per-worker sweep closes it once it has been idle for idle_timeout, and only then.
TEST_F(HttpProxyTest, AKeepAliveClientIdlePastTheIdleTimeoutIsClosedAndOneInUseIsNot) {
  HttpBackend a("a");
  ListenerConfig l;
  l.idle_timeout = 400ms;
  StartProxy(l);
  SetTable({EndpointOf("a", a.address())});
  Client busy(port());
  Client idle(port());
  Client silent(port());  // never sends a byte
  ASSERT_EQ(idle.Send(http::verb::get, "/").status, 200);
  // The busy client's requests come more often than the timeout, for three timeouts' worth.
  const auto until = std::chrono::steady_clock::now() + 1200ms;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_EQ(busy.Send(http::verb::get, "/").status, 200);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(idle.Closed());
  EXPECT_TRUE(silent.Closed());
  EXPECT_EQ(counters().idle_timeouts.load(), 2u);
  EXPECT_EQ(busy.Send(http::verb::get, "/").status, 200);
  EXPECT_TRUE(Eventually([&] { return proxy_->connections().active.load() == 1; }));
}

TEST_F(HttpProxyTest, AClientThatEndsItsSideAfterARequestIsAnsweredThenClosedAtOnce) {
  // The request and the client's FIN are often taken by one read; the connection must still
  // close after the answer, not linger until the idle timeout.
  HttpBackend a("a");
  ListenerConfig l;
  l.idle_timeout = 30s;
  StartProxy(l);
  SetTable({EndpointOf("a", a.address())});
  for (int i = 0; i < 20; ++i) {
    Client c(port());
    net::write(c.socket(), net::buffer(std::string("GET / HTTP/1.1\r\nHost: h\r\n\r\n")));
    c.socket().shutdown(net::ip::tcp::socket::shutdown_send);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(c.Read().status, 200) << "request " << i;
    EXPECT_TRUE(c.Closed());
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "request " << i;
  }
  EXPECT_TRUE(Eventually([&] { return proxy_->connections().active.load() == 0; }));
  EXPECT_EQ(counters().idle_timeouts.load(), 0u);
}

TEST_F(HttpProxyTest, APooledConnectionTheUpstreamClosedIsNeverUsed) {
  HttpBackend a("a");
  a.close_after_answer = true;  // keep-alive framing, then a close the gateway must notice
  StartProxy(ListenerConfig{});
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  for (int i = 1; i <= 5; ++i) {
    // A POST is never retried: each one must find the closed connection left out of the pool.
    const Reply r = client.Send(http::verb::post, "/post", "once");
    ASSERT_EQ(r.status, 200) << i << ": " << r.body;
    ASSERT_TRUE(Eventually([&] { return a.closed.load() == i; }, 3s));
  }
  EXPECT_EQ(a.connections.load(), 5);
  EXPECT_EQ(a.requests.load(), 5);
  EXPECT_EQ(proxy_->pool_stats().reused, 0u);
  EXPECT_EQ(proxy_->pool_stats().retired_closed, 4u);  // the fifth is still in the pool
  EXPECT_EQ(counters().retries.load(), 0u);
}

TEST_F(HttpProxyTest, AGetOnAPooledConnectionTheUpstreamClosedGoesAgainUncounted) {
  HttpBackend a("a");
  a.close_after_answer = true;
  StartProxy(ListenerConfig{});
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  for (int i = 1; i <= 5; ++i) {
    // A GET takes the pooled connection without the liveness peek. Finding it closed is neither
    // the instance's failure nor a retry: the GET goes again, on a new connection.
    const Reply r = client.Send(http::verb::get, "/thing");
    ASSERT_EQ(r.status, 200) << i << ": " << r.body;
    ASSERT_TRUE(Eventually([&] { return a.closed.load() == i; }, 3s));
  }
  EXPECT_EQ(a.connections.load(), 5);
  EXPECT_EQ(a.requests.load(), 5);
  EXPECT_EQ(proxy_->pool_stats().reused, 0u);
  EXPECT_EQ(proxy_->pool_stats().retired_closed, 4u);  // the fifth is still in the pool
  // Taken without the peek: each of the four was written to, then found closed.
  EXPECT_EQ(counters().upstream_reused.load(), 4u);
  EXPECT_EQ(counters().retries.load(), 0u);
  EXPECT_EQ(CountersOf("a").requests.load(), 5u);
  EXPECT_EQ(CountersOf("a").failed_requests.load(), 0u);
  // (The client has the answer a moment before the attempt ends.)
  EXPECT_TRUE(Eventually([&] { return CountersOf("a").active.load() == 0; }));
}

TEST_F(HttpProxyTest, BytesSentAfterABodilessAnswerAreNeverReadAsTheNextAnswer) {
  // The instance answers each HEAD, then sends the body a HEAD must not have, late, on the same
  // connection. A GET that follows is idempotent and takes a pooled connection without the
  // liveness peek -- but not this one: it would read those bytes as its answer.
  HttpBackend a("a");
  a.late_head_body_ms = 20;
  StartProxy(ListenerConfig{});
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  for (int i = 1; i <= 3; ++i) {
    const Reply head = client.Send(http::verb::head, "/thing");
    ASSERT_EQ(head.status, 200) << i;
    EXPECT_EQ(head.body, "") << i;
    std::this_thread::sleep_for(100ms);  // the stray bytes have come
    const Reply get = client.Send(http::verb::get, "/thing");
    ASSERT_EQ(get.status, 200) << i << ": " << get.body;
    EXPECT_EQ(get.body, "a GET /thing") << i;
    EXPECT_NE(get.conn, head.conn) << i;  // not the connection with the stray bytes
  }
  EXPECT_EQ(proxy_->pool_stats().retired_closed, 3u);
  EXPECT_EQ(counters().retries.load(), 0u);
}

TEST_F(HttpProxyTest, ChunkedAndLargeBodiesStreamBothWays) {
  HttpBackend a("a");
  StartProxy({});
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  // 8 MiB up, chunked by the client in 64 KiB chunks, echoed back.
  std::string payload(8 << 20, '\0');
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7 % 251);
  std::string raw = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (std::size_t off = 0; off < payload.size(); off += 65536) {
    char size[16];
    std::snprintf(size, sizeof size, "%x\r\n", 65536);
    raw += size;
    raw.append(payload, off, 65536);
    raw += "\r\n";
  }
  raw += "0\r\n\r\n";
  std::future<Reply> echoed = std::async(std::launch::async, [&] { return client.SendRaw(raw); });
  const Reply up = echoed.get();
  ASSERT_EQ(up.status, 200);
  EXPECT_EQ(up.body.size(), payload.size());
  EXPECT_TRUE(up.body == payload);
  // 48 MiB down, chunked by the backend.
  const Reply down = client.Send(http::verb::get, "/big?n=50331648");
  ASSERT_EQ(down.status, 200);
  EXPECT_TRUE(down.chunked);
  ASSERT_EQ(down.body.size(), 50331648u);
  EXPECT_EQ(down.body.substr(50331640), "01234567");
  // A 16 MiB Content-Length upload.
  const std::string big(16 << 20, 'x');
  const Reply sized = client.Send(http::verb::put, "/echo", big);
  EXPECT_EQ(sized.status, 200);
  EXPECT_EQ(sized.body.size(), big.size());
}

TEST_F(HttpProxyTest, AResponseFramedByCloseIsRechunkedAndTheClientKeepsItsConnection) {
  HttpBackend a("a");
  a.frame_by_close = true;
  StartProxy({});
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  const Reply r = client.Send(http::verb::get, "/thing");
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.chunked);
  EXPECT_EQ(r.body, "a GET /thing");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(client.Send(http::verb::get, "/again").body, "a GET /again");
}

TEST_F(HttpProxyTest, ASilentUpstreamGets504WithinTheRouteTimeoutAndIsNotRetried) {
  HttpBackend slow("slow"), other("other");
  slow.delay_ms = 1500;
  StartBehindRouteTimeout(300ms, slow);
  const auto t0 = std::chrono::steady_clock::now();
  const Reply reply = Get(port(), "/work");
  EXPECT_EQ(reply.status, 504);
  EXPECT_EQ(reply.body, "slow did not answer within 300 ms\n");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1400ms);  // the timeout's doing, not the answer
  EXPECT_EQ(slow.requests.load(), 1);
  EXPECT_EQ(counters().response_timeouts.load(), 1u);
  EXPECT_EQ(counters().retries.load(), 0u);
}

// Each answer is timed on its own: answers on one connection that together take longer than the
// route's timeout are not cut by the timing of those before them, and a late one still is.
TEST_F(HttpProxyTest, EachAnswerHasTheWholeRouteTimeoutAndAnEarlierTimerCutsNothing) {
  HttpBackend b("b");
  b.delay_ms = 120;
  StartBehindRouteTimeout(300ms, b);
  Client client(port());
  for (int i = 0; i < 6; ++i) {  // 720 ms in all, each 120 ms
    const Reply reply = client.Send(http::verb::get, "/n" + std::to_string(i));
    EXPECT_EQ(reply.status, 200) << i;
    EXPECT_EQ(reply.body, "b GET /n" + std::to_string(i));
  }
  EXPECT_EQ(counters().response_timeouts.load(), 0u);
  b.delay_ms = 800;
  EXPECT_EQ(client.Send(http::verb::get, "/late").status, 504);
  EXPECT_EQ(counters().response_timeouts.load(), 1u);
  b.delay_ms = 0;
  Client again(port());
  EXPECT_EQ(again.Send(http::verb::get, "/after").body, "b GET /after");
  EXPECT_EQ(counters().response_timeouts.load(), 1u);
}

TEST_F(HttpProxyTest, AnInstanceAnswering5xxIsEjectedAndComesBack) {
  HttpBackend sick("sick"), well("well");
  sick.status = 503;
  ListenerConfig l;
  l.eject_after_failures = 3;
  l.ejection = 500ms;
  StartProxy(l);
  SetTable({EndpointOf("sick", sick.address()), EndpointOf("well", well.address())});
  int answered_503 = 0;
  for (int i = 0; i < 60 && CountersOf("sick").ejections_total.load() == 0; ++i) {
    answered_503 += Get(port(), "/").status == 503;  // passed on, not retried: not idempotent-safe
  }
  EXPECT_EQ(answered_503, 3);
  EXPECT_EQ(CountersOf("sick").ejections_total.load(), 1u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Get(port(), "/").instance, "well");
  sick.status = 200;
  EXPECT_TRUE(Eventually([&] { return Get(port(), "/").instance == "sick"; }, 5s,
                         20ms));  // back after 500 ms
}

TEST_F(HttpProxyTest, ARequestInFlightFinishesWhenItsInstanceStartsDraining) {
  HttpBackend old_one("old"), new_one("new");
  old_one.delay_ms = 500;
  StartProxy({});
  SetTable({EndpointOf("old", old_one.address())});
  std::future<Reply> in_flight = std::async(std::launch::async, [&] { return Get(port(), "/"); });
  ASSERT_TRUE(Eventually([&] { return old_one.requests.load() == 1; }));
  SetTable({EndpointOf("old", old_one.address(), router::EndpointState::kDraining),
            EndpointOf("new", new_one.address())});
  EXPECT_EQ(Get(port(), "/").instance, "new");
  const Reply r = in_flight.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.instance, "old");
}

TEST_F(HttpProxyTest, StopAcceptingClosesIdleKeepAliveConnections) {
  HttpBackend a("a");
  StartProxy({});
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  ASSERT_EQ(client.Send(http::verb::get, "/").status, 200);
  proxy_->StopAccepting();
  EXPECT_TRUE(client.Closed());
  EXPECT_TRUE(Eventually([&] { return proxy_->connections().active.load() == 0; }));
}

TEST_F(HttpProxyTest, ConnectionsOverMaxConnectionsGet503AndTheOthersAreServed) {
  HttpBackend a("a");
  ListenerConfig l;
  l.max_connections = 1;
  StartProxy(l);
  SetTable({EndpointOf("a", a.address())});
  Client kept(port());
  ASSERT_EQ(kept.Send(http::verb::get, "/").status, 200);
  Client over(port());
  const Reply refused = over.Send(http::verb::get, "/");
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("too many connections"), std::string::npos) << refused.body;
  EXPECT_TRUE(over.Closed());
  EXPECT_EQ(proxy_->connections().refused.load(), 1u);
  EXPECT_EQ(kept.Send(http::verb::get, "/").status, 200);  // the one inside is still served
}

struct Malformed {
  const char* name;
  std::string raw;
  int status;
};

TEST_F(HttpProxyTest, MalformedRequestsGet400AndTheGatewayKeepsServing) {
  HttpBackend a("a");
  StartProxy({});
  SetTable({EndpointOf("a", a.address())});
  const std::vector<Malformed> cases = {
      {"not http", "HELLO THERE\r\n\r\n", 400},
      {"binary", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) + "\r\n\r\n", 400},
      {"no host on 1.1", "GET / HTTP/1.1\r\n\r\n", 400},
      {"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"absolute form", "GET http://example.com/ HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"asterisk form", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"http/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400},
      {"version 1.2", "GET / HTTP/1.2\r\nHost: x\r\n\r\n", 400},
      {"space in name", "GET / HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", 400},
      {"no colon", "GET / HTTP/1.1\r\nHost: x\r\nJustAName\r\n\r\n", 400},
      {"bad content-length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12a\r\n\r\n", 400},
      {"two content-lengths",
       "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", 400},
      {"negative content-length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400},
      {"bad chunk size",
       "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nhi\r\n0\r\n\r\n",
       400},
      {"unknown transfer-encoding",
       "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc", 400},
      {"transfer-encoding and content-length",
       "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
       "0\r\n\r\n",
       400},
      {"nul in value", std::string("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 37), 400},
      {"control char in target", "GET /a\x01 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"head too large",
       "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'b') + "\r\n\r\n", 431},
      {"expect other", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx",
       417},
  };
  for (const Malformed& m : cases) {
    Client client(port());
    const Reply r = client.SendRaw(m.raw);
    EXPECT_EQ(r.status, m.status) << m.name << ": " << r.body;
    EXPECT_FALSE(r.keep_alive) << m.name;
    EXPECT_TRUE(client.Closed()) << m.name;
    EXPECT_EQ(Get(port(), "/ok").status, 200) << "after " << m.name;
  }
  EXPECT_EQ(counters().bad_requests.load(), cases.size() - 1);  // 417 is not malformed
}

TEST_F(HttpProxyTest, ExpectContinueIsAnsweredByTheGateway) {
  HttpBackend a("a");
  StartProxy({});
  SetTable({EndpointOf("a", a.address())});
  Client client(port());
  const std::string head =
      "PUT /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
  boost::system::error_code ec;
  net::write(client.socket(), net::buffer(head), ec);
  const Reply interim = client.Read();
  EXPECT_EQ(interim.status, 100);
  net::write(client.socket(), net::buffer(std::string("hello")), ec);
  const Reply r = client.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
  EXPECT_EQ(a.last_head().find("Expect"), std::string::npos) << a.last_head();
}

}  // namespace
}  // namespace drover::gateway
