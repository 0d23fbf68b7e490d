#include "net/sockets.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <memory>

#include "common/host_port.h"

namespace drover::net {

namespace asio = boost::asio;

Result<asio::ip::tcp::endpoint> ParseEndpoint(std::string_view address, std::string_view what,
                                              bool listening) {
  DROVER_ASSIGN_OR_RETURN(
      const HostPort hp,
      ParseHostPort(address, what, {.allow_port_zero = listening, .require_ip = true}));
  boost::system::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(hp.host, ec);
  if (ec)
    return InvalidArgumentError(std::string(what) + " '" + std::string(address) +
                                "': " + ec.message());
  return asio::ip::tcp::endpoint(ip, hp.port);
}

boost::system::error_code Listen(asio::ip::tcp::acceptor& acceptor,
                                 const asio::ip::tcp::endpoint& endpoint, int backlog) {
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(backlog, ec);
  return ec;
}

namespace {

using boost::system::error_code;
using tcp = asio::ip::tcp;

// What Asio knows of a socket it did not set up itself lives in its implementation's state bits
// (Boost 1.74's reactive_socket_service_base), which only a class derived from the socket can
// name: the pointer to the protected member is formed here and applied to any socket.
struct SocketState : tcp::socket {
  static asio::detail::socket_ops::state_type& Of(tcp::socket& s) {
    constexpr auto impl = &SocketState::impl_;
    return (s.*impl).get_implementation().state_;
  }
};

error_code Errno(int err) { return {err, boost::system::system_category()}; }

}  // namespace

error_code Adopt(tcp::socket& socket, const tcp& protocol, int fd) {
  error_code ec;
  socket.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return ec;
  }
  auto& state = SocketState::Of(socket);
  state |= asio::detail::socket_ops::internal_non_blocking;
  state &= ~asio::detail::socket_ops::possible_dup;
  return ec;
}

void MarkNonBlocking(tcp::socket& socket) {
  SocketState::Of(socket) |= asio::detail::socket_ops::user_set_non_blocking;
}

asio::awaitable<error_code> Connect(tcp::socket& socket, const tcp::endpoint& to,
                                    std::chrono::nanoseconds timeout) {
  const int fd =
      ::socket(to.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) co_return Errno(errno);
  const int rc = ::connect(fd, to.data(), static_cast<socklen_t>(to.size()));
  const int err = rc == 0 ? 0 : errno;
  if (rc != 0 && err != EINPROGRESS) {
    ::close(fd);
    co_return Errno(err);
  }
  if (error_code ec = Adopt(socket, to.protocol(), fd)) co_return ec;
  if (rc == 0) co_return error_code{};  // at once (loopback may)

  // The timer's handler can outlive this frame (queued as the wait ends): it touches the socket
  // only while the wait is pending, and what it says goes through the state it shares.
  struct Deadline {
    bool pending = true;
    bool timed_out = false;
  };
  const auto deadline = std::make_shared<Deadline>();
  asio::steady_timer timer(socket.get_executor());
  if (timeout > std::chrono::nanoseconds::zero()) {
    timer.expires_after(timeout);
    timer.async_wait([&socket, deadline](error_code ec) {
      if (ec || !deadline->pending) return;
      deadline->timed_out = true;
      socket.cancel(ec);  // the wait below ends with operation_aborted
    });
  }
  error_code ec;
  co_await socket.async_wait(tcp::socket::wait_write,
                             asio::redirect_error(asio::use_awaitable, ec));
  deadline->pending = false;
  timer.cancel();
  if (!ec && socket.is_open()) {
    int so_error = 0;
    socklen_t size = sizeof so_error;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &so_error, &size) != 0) {
      so_error = errno;
    }
    ec = so_error != 0 ? Errno(so_error) : error_code{};
  } else if (!ec) {
    ec = asio::error::operation_aborted;  // closed meanwhile
  }
  if (deadline->timed_out) ec = asio::error::timed_out;
  if (ec) {
    error_code ignored;
    socket.close(ignored);
  }
  co_return ec;
}

void SetKeepAlive(asio::ip::tcp::socket& socket) { SetKeepAlive(socket.native_handle()); }

void SetKeepAlive(int fd) {
  EnableKeepAlive(fd);
  TuneKeepAliveProbes(fd);
}

void EnableKeepAlive(int fd) {
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

void TuneKeepAliveProbes(int fd) {
  const int idle = 30, interval = 10, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

}  // namespace drover::net
