#include "net/sockets.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/ip/address.hpp>

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

void SetKeepAlive(asio::ip::tcp::socket& socket) { SetKeepAlive(socket.native_handle()); }

void SetKeepAlive(int fd) {
  const int on = 1, idle = 30, interval = 10, count = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

}  // namespace drover::net
