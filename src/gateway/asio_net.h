// Small Asio helpers shared by the gateway's listeners, probes and load generator. Internal:
// included only by .cc files that already use Asio.
#pragma once

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <charconv>
#include <optional>
#include <string_view>

namespace drover::gateway {

// "ip:port" as an endpoint; nullopt when malformed. Port 0 (any free port) only if `listening`.
inline std::optional<boost::asio::ip::tcp::endpoint> ParseEndpoint(std::string_view address,
                                                                   bool listening = false) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  boost::system::error_code ec;
  const auto ip = boost::asio::ip::make_address(std::string(address.substr(0, colon)), ec);
  unsigned port = 0;
  const char* end = address.data() + address.size();
  const auto [ptr, err] = std::from_chars(address.data() + colon + 1, end, port);
  if (ec || err != std::errc() || ptr != end || port > 65535 || (port == 0 && !listening)) {
    return std::nullopt;
  }
  return boost::asio::ip::tcp::endpoint(ip, static_cast<unsigned short>(port));
}

// open + SO_REUSEADDR + bind + listen; the first error, if any.
inline boost::system::error_code Listen(boost::asio::ip::tcp::acceptor& acceptor,
                                        const boost::asio::ip::tcp::endpoint& endpoint,
                                        int backlog) {
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(boost::asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(backlog, ec);
  return ec;
}

// `socket` (accepted on the acceptor's io_context) re-homed on `executor`'s. Accepting straight
// into another io_context's socket leaves that socket inside the acceptor context's pending
// operations, which outlive the other context at shutdown; moving the descriptor after the
// accept keeps every context's objects its own.
template <typename Executor>
boost::asio::ip::tcp::socket MoveTo(boost::asio::ip::tcp::socket socket, const Executor& executor) {
  boost::system::error_code ec;
  const auto protocol = socket.local_endpoint(ec).protocol();
  boost::asio::ip::tcp::socket moved(executor);
  const int fd = socket.release(ec);
  if (!ec) moved.assign(protocol, fd, ec);
  return moved;
}

// TCP_NODELAY and keepalive probes: after 30 s idle, every 10 s, 3 of them -- a peer that
// vanished without a FIN is found within about a minute even when idle timeouts are longer.
inline void SetKeepAlive(boost::asio::ip::tcp::socket& s) {
  boost::system::error_code ec;
  s.set_option(boost::asio::socket_base::keep_alive(true), ec);
  s.set_option(boost::asio::ip::tcp::no_delay(true), ec);
  const int fd = s.native_handle();
  const int idle = 30, interval = 10, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

}  // namespace drover::gateway
