#include "gateway/health_check.h"

// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include <boost/asio.hpp>
#include <memory>
#include <string>

#include "gateway/upstream.h"

namespace drover::gateway {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {

constexpr std::size_t kMaxReply = 4096;

struct Probe {
  explicit Probe(const net::any_io_executor& ex) : socket(ex), timer(ex) {}
  tcp::socket socket;
  net::steady_timer timer;
};

// True when `address` answers GET /ready with 200 within `timeout`.
net::awaitable<bool> CheckReady(std::string address, Duration timeout) {
  const auto to = drover::net::ParseEndpoint(address, "health check address");
  if (!to.ok()) co_return false;
  error_code ec;
  auto probe = std::make_shared<Probe>(co_await net::this_coro::executor);
  probe->timer.expires_after(timeout);
  probe->timer.async_wait([probe](error_code wait_ec) {
    if (!wait_ec) {
      error_code ignored;
      probe->socket.close(ignored);  // whatever is pending fails
    }
  });
  co_await probe->socket.async_connect(*to, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  const std::string request = "GET /ready HTTP/1.1\r\nHost: " + address +
                              "\r\nUser-Agent: drover-gateway\r\nConnection: close\r\n\r\n";
  co_await net::async_write(probe->socket, net::buffer(request),
                            net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  std::string reply;
  char chunk[512];
  while (reply.size() < kMaxReply && reply.find("\r\n") == std::string::npos) {
    const std::size_t n = co_await probe->socket.async_read_some(
        net::buffer(chunk), net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    reply.append(chunk, n);
  }
  probe->timer.cancel();
  error_code ignored;
  probe->socket.close(ignored);
  // "HTTP/1.1 200 OK": only a 200 status line passes.
  co_return reply.starts_with("HTTP/1.") && reply.size() >= 12 && reply.compare(8, 4, " 200") == 0;
}

net::awaitable<void> CheckOne(Upstream& upstream, std::shared_ptr<InstanceCounters> counters,
                              std::string address) {
  const bool ok = co_await CheckReady(std::move(address), upstream.listener().health_check_timeout);
  upstream.ReportCheck(*counters, ok);
}

net::awaitable<void> CheckLoop(Upstream& upstream) {
  const auto executor = co_await net::this_coro::executor;
  net::steady_timer timer(executor);
  while (true) {
    const auto snapshot = upstream.Snapshot();
    const router::RoutingTable& table = *snapshot->router->table;
    for (std::size_t i = 0; i < table.size(); ++i) {
      const router::Endpoint& e = table.at(i);
      if (e.health.empty() || !e.KeyEligible()) continue;
      net::co_spawn(executor, CheckOne(upstream, snapshot->counters[i], e.health), net::detached);
    }
    timer.expires_after(upstream.listener().health_check_interval);
    error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
  }
}

}  // namespace

void StartHealthChecks(net::io_context& io, Upstream& upstream) {
  if (upstream.listener().health_check_interval <= Duration::zero()) return;
  net::co_spawn(net::make_strand(io), CheckLoop(upstream), net::detached);
}

}  // namespace drover::gateway
