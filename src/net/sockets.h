// Asio socket helpers every networked part shares: endpoints from "host:port", listening, taking
// a new descriptor into a socket, connecting, keepalive. Internal to the parts that already use
// Asio.
#pragma once

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
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

// Takes `fd` into `socket` (closed; its executor picks the reactor): a stream socket of
// `protocol` opened non-blocking (accept4 or socket with SOCK_NONBLOCK) and never duplicated.
// Asio is told both, as it knows them of the sockets it opens itself, so neither costs a system
// call later: it would set O_NONBLOCK again (ioctl FIONBIO) before the first wait, and, taking
// any assigned descriptor for a possible duplicate, remove it from the epoll set (EPOLL_CTL_DEL)
// before closing it -- the kernel drops a closed descriptor that has no duplicate by itself.
// Synchronous operations still wait, as on any Asio socket, unless MarkNonBlocking() says
// otherwise. On error `fd` is closed.
boost::system::error_code Adopt(boost::asio::ip::tcp::socket& socket,
                                const boost::asio::ip::tcp& protocol, int fd);

// `socket.non_blocking(true)` for a socket Adopt() or Connect() made, without the ioctl: its
// synchronous reads and writes answer would_block instead of waiting.
void MarkNonBlocking(boost::asio::ip::tcp::socket& socket);

// Connects `socket` (closed; its executor picks the reactor) to `to`: a non-blocking socket(),
// connect(), then a wait for writability and SO_ERROR -- no ioctl, and none of the poll() Asio's
// own connect adds. After `timeout` (> 0) the attempt ends with timed_out; closing `socket`
// meanwhile ends it with operation_aborted. On error `socket` is closed. Asio leaves EPOLLOUT in
// the descriptor's epoll registration after the wait.
boost::asio::awaitable<boost::system::error_code> Connect(boost::asio::ip::tcp::socket& socket,
                                                          const boost::asio::ip::tcp::endpoint& to,
                                                          std::chrono::nanoseconds timeout);

// TCP_NODELAY and keepalive probes: after 30 s idle, every 10 s, 3 of them -- a peer that
// vanished without a FIN is found within about a minute even when idle timeouts are longer.
// (ListenerOptions::keep_alive sets them once on a listening socket, for all it accepts.)
void SetKeepAlive(boost::asio::ip::tcp::socket& socket);
void SetKeepAlive(int fd);
// SetKeepAlive in two steps, for connections most of which are short: TCP_NODELAY and keepalive
// on (2 setsockopt, the system's probe timing) at once, the probe timing (3 more) only on those
// that last. Tuning an established connection re-arms its keepalive timer by the new idle time.
void EnableKeepAlive(int fd);
void TuneKeepAliveProbes(int fd);

}  // namespace drover::net
