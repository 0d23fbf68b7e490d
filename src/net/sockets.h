// Asio socket helpers every networked part shares: endpoints from "host:port", listening, moving
// an accepted socket to its io thread, keepalive. Internal to the parts that already use Asio.
#pragma once

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <boost/asio/ip/tcp.hpp>
#include <string_view>

#include "drover/status.h"

namespace drover::net {

// "ip:port" (IPv4, or [IPv6]) as an endpoint, by common/host_port.h's rules; names are refused,
// since nothing here resolves them. Port 0 (any free port) only when `listening`.
Result<boost::asio::ip::tcp::endpoint> ParseEndpoint(std::string_view address,
                                                     std::string_view what, bool listening = false);

// open + SO_REUSEADDR + bind + listen; the first error, if any.
boost::system::error_code Listen(boost::asio::ip::tcp::acceptor& acceptor,
                                 const boost::asio::ip::tcp::endpoint& endpoint, int backlog);

// TCP_NODELAY and keepalive probes: after 30 s idle, every 10 s, 3 of them -- a peer that
// vanished without a FIN is found within about a minute even when idle timeouts are longer.
// (ListenerOptions::keep_alive sets them once on a listening socket, for all it accepts.)
void SetKeepAlive(boost::asio::ip::tcp::socket& socket);
void SetKeepAlive(int fd);

}  // namespace drover::net
