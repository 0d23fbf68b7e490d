// The socket helpers every server and proxy shares (net/sockets.h), over real loopback sockets on
// 127.0.0.2: a descriptor adopted into Asio, and Connect's success, refusal, timeout and abort.
#include "net/sockets.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace drover::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;

// A listening socket on 127.0.0.2 and a free port; `backlog` as given.
struct Listening {
  explicit Listening(int backlog = 16) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7f000002);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, backlog), 0);
    socklen_t size = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size);
    endpoint = tcp::endpoint(asio::ip::make_address("127.0.0.2"), ntohs(a.sin_port));
  }
  ~Listening() { ::close(fd); }
  int fd = -1;
  tcp::endpoint endpoint;
};

// Connections that fill a never-accepting listener's queue (backlog 0), so the kernel drops
// further SYNs unanswered and a connect gets no answer.
struct Fillers {
  explicit Fillers(const Listening& server) {
    for (int i = 0; i < 4; ++i) {
      const int f = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      ::connect(f, server.endpoint.data(), static_cast<socklen_t>(server.endpoint.size()));
      fds.push_back(f);
    }
    std::this_thread::sleep_for(50ms);  // the handshakes that will happen have happened
  }
  ~Fillers() {
    for (const int f : fds) ::close(f);
  }
  std::vector<int> fds;
};

error_code RunConnect(asio::io_context& io, tcp::socket& socket, const tcp::endpoint& to,
                      std::chrono::nanoseconds timeout) {
  std::future<error_code> done = asio::co_spawn(io, Connect(socket, to, timeout), asio::use_future);
  io.restart();
  io.run_for(5s);
  return done.wait_for(0s) == std::future_status::ready ? done.get() : asio::error::in_progress;
}

TEST(SocketsTest, AnAdoptedDescriptorIsNonBlockingAndAsioKnowsItWithoutAsking) {
  asio::io_context io;
  Listening server;
  tcp::socket client(io);
  client.connect(server.endpoint);
  const int fd = ::accept4(server.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  ASSERT_GE(fd, 0);

  tcp::socket accepted(io);
  ASSERT_FALSE(Adopt(accepted, tcp::v4(), fd));
  EXPECT_EQ(accepted.native_handle(), fd);
  EXPECT_NE(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  // Asio took the kernel's word: its own flag is set, so no FIONBIO comes before a wait...
  EXPECT_TRUE(accepted.native_non_blocking());
  // ...while synchronous operations still wait, as on any Asio socket, until marked otherwise.
  EXPECT_FALSE(accepted.non_blocking());
  MarkNonBlocking(accepted);
  EXPECT_TRUE(accepted.non_blocking());
  std::array<char, 16> buf{};
  error_code ec;
  EXPECT_EQ(accepted.read_some(asio::buffer(buf), ec), 0u);
  EXPECT_EQ(ec, asio::error::would_block);

  // Waits and reads go through the reactor as usual.
  std::size_t got = 0;
  accepted.async_read_some(asio::buffer(buf), [&](error_code e, std::size_t n) {
    ec = e;
    got = n;
  });
  asio::write(client, asio::buffer("hello", 5));
  io.run_for(5s);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(std::string(buf.data(), got), "hello");

  // Closing it closes the descriptor (no duplicate was assumed).
  accepted.close();
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(SocketsTest, AdoptClosesADescriptorItCannotTake) {
  asio::io_context io;
  tcp::socket open(io);
  open.open(tcp::v4());  // a socket that holds one already
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(Adopt(open, tcp::v4(), fd), asio::error::already_open);
  EXPECT_NE(open.native_handle(), fd);
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // not leaked
}

TEST(SocketsTest, ConnectReachesAListenerOnAnotherLoopbackAddress) {
  asio::io_context io;
  Listening server;
  tcp::socket socket(io);
  const error_code ec = RunConnect(io, socket, server.endpoint, 1s);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(socket.is_open());
  EXPECT_EQ(socket.remote_endpoint(), server.endpoint);
  EXPECT_TRUE(socket.native_non_blocking());
  // The connection is real: the listener has it, and bytes cross.
  const int peer = ::accept4(server.fd, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(peer, 0);
  asio::write(socket, asio::buffer("ping", 4));
  std::array<char, 4> buf{};
  EXPECT_EQ(::recv(peer, buf.data(), buf.size(), MSG_WAITALL), 4);
  EXPECT_EQ(std::string(buf.data(), 4), "ping");
  ::close(peer);
}

TEST(SocketsTest, ConnectToAClosedPortIsRefusedAndLeavesTheSocketClosed) {
  asio::io_context io;
  tcp::endpoint closed;
  {
    Listening gone;
    closed = gone.endpoint;
  }
  tcp::socket socket(io);
  const error_code ec = RunConnect(io, socket, closed, 1s);
  EXPECT_EQ(ec, asio::error::connection_refused) << ec.message();
  EXPECT_FALSE(socket.is_open());
}

TEST(SocketsTest, ConnectThatGetsNoAnswerEndsAtItsTimeout) {
  asio::io_context io;
  Listening server(0);
  const Fillers fillers(server);
  tcp::socket socket(io);
  const auto start = std::chrono::steady_clock::now();
  const error_code ec = RunConnect(io, socket, server.endpoint, 200ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(ec, asio::error::timed_out) << ec.message();
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 3s);
  EXPECT_FALSE(socket.is_open());
}

TEST(SocketsTest, ClosingTheSocketEndsAPendingConnect) {
  asio::io_context io;
  Listening server(0);
  const Fillers fillers(server);
  tcp::socket socket(io);
  asio::steady_timer closer(io, 100ms);
  closer.async_wait([&](error_code) { socket.close(); });
  const auto start = std::chrono::steady_clock::now();
  const error_code ec = RunConnect(io, socket, server.endpoint, 10s);
  EXPECT_EQ(ec, asio::error::operation_aborted) << ec.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_FALSE(socket.is_open());
}

}  // namespace
}  // namespace drover::net
