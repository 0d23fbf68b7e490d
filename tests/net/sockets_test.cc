// The socket helpers every server and proxy shares (net/sockets.h), over real loopback sockets on
// 127.0.0.2: a descriptor adopted into Asio; Connect's success, refusal, timeout and abort; and
// waits that cost no system call after a read that took all there was, and lose no edge; and writes
// of one piece, a few small ones and many large ones.
#include "net/sockets.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <string_view>
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
  // A plain blocking socket connected to it (the caller closes it), or -1.
  int Connect() const {
    const int far = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (far >= 0 && ::connect(far, endpoint.data(), static_cast<socklen_t>(endpoint.size())) == 0) {
      return far;
    }
    if (far >= 0) ::close(far);
    return -1;
  }
  // The next connection in its queue, non-blocking, or -1.
  int Accept() const { return ::accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC); }
  // A connection whose client (`far`, the caller closes it) sent `bytes` -- and its end, with
  // `end` -- before it was accepted: the accepted side, or -1.
  int AcceptAfter(std::string_view bytes, bool end, int& far) const {
    far = Connect();
    EXPECT_GE(far, 0);
    if (far < 0) return -1;
    EXPECT_EQ(::send(far, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    if (end) ::shutdown(far, SHUT_WR);
    return Accept();
  }
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

TEST(SocketsTest, AddressTextIsWhatAsioWrites) {
  for (const char* text : {"0.0.0.0", "127.0.0.1", "10.0.0.5", "192.168.100.9", "255.255.255.255",
                           "1.20.203.4", "::1", "fe80::1", "2001:db8::42"}) {
    const asio::ip::address ip = asio::ip::make_address(text);
    EXPECT_EQ(AddressText(ip), ip.to_string()) << text;
    EXPECT_EQ(AddressText(ip), text);
  }
}

TEST(SocketsTest, AnAdoptedDescriptorIsNonBlockingAndAsioKnowsItWithoutAsking) {
  asio::io_context io;
  Listening server;
  tcp::socket client(io);
  client.connect(server.endpoint);
  const int fd = server.Accept();
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

// Connect run by a one-thread context's only thread, where the event that ends the wait tells
// success from failure without SO_ERROR.
error_code RunConnectInside(asio::io_context& io, tcp::socket& socket, const tcp::endpoint& to) {
  std::optional<error_code> result;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { result = co_await Connect(socket, to, 1s); },
      asio::detached);
  io.restart();
  io.run_for(5s);
  return result.value_or(asio::error::in_progress);
}

TEST(SocketsTest, ConnectInsideAOneThreadContextStillTellsSuccessFromRefusal) {
  Listening server;
  {
    asio::io_context io(1);
    tcp::socket socket(io);
    const error_code ec = RunConnectInside(io, socket, server.endpoint);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_TRUE(socket.is_open());
    EXPECT_TRUE(KnownDrained(socket));  // no greeting: the first wait will cost nothing
    const int peer = ::accept4(server.fd, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(peer, 0);
    ::close(peer);
  }
  tcp::endpoint closed;
  {
    Listening gone;
    closed = gone.endpoint;
  }
  asio::io_context io(1);
  tcp::socket socket(io);
  const error_code ec = RunConnectInside(io, socket, closed);
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

// StartConnect, Connect's form for callers without a coroutine: the same outcomes, each reported
// exactly once, on the context's thread.
TEST(SocketsTest, StartConnectReportsSuccessRefusalAndTimeoutOnceEach) {
  const auto run = [](const tcp::endpoint& to, std::chrono::nanoseconds timeout,
                      bool keep_open) -> error_code {
    asio::io_context io(1);
    tcp::socket socket(io);
    int calls = 0;
    bool on_thread = false;
    error_code result = asio::error::in_progress;
    asio::post(io, [&] {
      StartConnect(socket, to, timeout, [&](error_code ec) {
        ++calls;
        on_thread = io.get_executor().running_in_this_thread();
        result = ec;
      });
    });
    io.run_for(3s);
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(on_thread);
    EXPECT_EQ(socket.is_open(), keep_open);
    return result;
  };
  {
    Listening server;
    EXPECT_FALSE(run(server.endpoint, 1s, true));
    const int peer = ::accept4(server.fd, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(peer, 0);
    if (peer >= 0) ::close(peer);
  }
  tcp::endpoint closed;
  {
    Listening gone;
    closed = gone.endpoint;
  }
  EXPECT_EQ(run(closed, 1s, false), asio::error::connection_refused);
  Listening silent(0);
  const Fillers fillers(silent);
  EXPECT_EQ(run(silent.endpoint, 200ms, false), asio::error::timed_out);
}

// The deadlines of a context share one timer: an early deadline that ended (its connect done)
// leaves the timer armed for it, and a later one on a silent address still ends at its own time,
// neither at the earlier one nor never. With the timer kept armed (the gateway's workers) as well
// as with the default, which lets run() end once nothing is pending.
TEST(SocketsTest, ConnectDeadlinesSharingATimerEachEndAtTheirOwnTime) {
  for (const bool keep_armed : {false, true}) {
    SCOPED_TRACE(keep_armed ? "timer kept armed" : "timer cancelled when idle");
    asio::io_context io(1);
    if (keep_armed) KeepConnectTimerArmed(io);
    Listening server;
    Listening silent(0);
    const Fillers fillers(silent);
    tcp::socket quick(io);
    tcp::socket slow(io);
    tcp::socket early(io);
    error_code quick_ec = asio::error::in_progress;
    error_code slow_ec = asio::error::in_progress;
    error_code early_ec = asio::error::in_progress;
    std::chrono::steady_clock::duration slow_took{};
    std::chrono::steady_clock::duration early_took{};
    const auto start = std::chrono::steady_clock::now();
    asio::post(io, [&] {
      // Armed first, for 1 s: the timer's expiry; it succeeds at once.
      StartConnect(quick, server.endpoint, 1s, [&](error_code ec) {
        quick_ec = ec;
        // Later than the timer's expiry: the timer is not re-armed for it until it fires.
        StartConnect(slow, silent.endpoint, 1500ms, [&](error_code ec2) {
          slow_ec = ec2;
          slow_took = std::chrono::steady_clock::now() - start;
        });
        // Earlier than the expiry: re-arms it.
        StartConnect(early, silent.endpoint, 100ms, [&](error_code ec2) {
          early_ec = ec2;
          early_took = std::chrono::steady_clock::now() - start;
        });
      });
    });
    io.run_for(5s);
    EXPECT_FALSE(quick_ec) << quick_ec.message();
    EXPECT_EQ(early_ec, asio::error::timed_out) << early_ec.message();
    EXPECT_EQ(slow_ec, asio::error::timed_out) << slow_ec.message();
    EXPECT_GE(early_took, 100ms);
    EXPECT_LT(early_took, 800ms);  // well before the 1 s the timer was first armed for
    EXPECT_GE(slow_took, 1500ms);
    EXPECT_LT(slow_took, 4s);
    EXPECT_FALSE(slow.is_open());
    EXPECT_FALSE(early.is_open());
    const int peer = ::accept4(server.fd, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(peer, 0);
    if (peer >= 0) ::close(peer);
  }
}

// A connect started off the thread that runs its context (here before it runs at all) gets a
// timer of its own for its deadline, on the socket's executor, and still ends in time.
TEST(SocketsTest, AConnectStartedOffItsContextsThreadStillEndsAtItsDeadline) {
  Listening silent(0);
  const Fillers fillers(silent);
  asio::io_context io(1);
  tcp::socket socket(io);
  error_code result = asio::error::in_progress;
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  StartConnect(socket, silent.endpoint, 200ms, [&](error_code ec) {
    ++calls;
    result = ec;
  });
  io.run_for(3s);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(result, asio::error::timed_out) << result.message();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_FALSE(socket.is_open());
}

// A context destroyed while a connect waits: its deadline leaves the shared timer with it, and the
// attempt's handler is destroyed without being called (as for any pending operation).
TEST(SocketsTest, AContextDestroyedWithAConnectPendingLetsItsDeadlineGo) {
  for (const bool keep_armed : {false, true}) {
    SCOPED_TRACE(keep_armed ? "timer kept armed" : "timer cancelled when idle");
    Listening silent(0);
    const Fillers fillers(silent);
    int calls = 0;
    {
      asio::io_context io(1);
      if (keep_armed) KeepConnectTimerArmed(io);
      tcp::socket socket(io);
      asio::post(io,
                 [&] { StartConnect(socket, silent.endpoint, 10s, [&](error_code) { ++calls; }); });
      io.run_for(100ms);
      EXPECT_TRUE(socket.is_open());  // still connecting
    }  // the socket, then the context with the attempt's completion still queued
    EXPECT_EQ(calls, 0);
  }
}

// A connected pair: `near` adopted into `io` (from this thread, which does not run it), `far` a
// plain blocking descriptor on the other end.
struct Pair {
  explicit Pair(asio::io_context& io, Registration also = {}) : near(io) {
    Listening server;
    far = server.Connect();
    EXPECT_GE(far, 0);
    const int fd = server.Accept();
    EXPECT_GE(fd, 0);
    EXPECT_FALSE(Adopt(near, tcp::v4(), fd, also));
  }
  ~Pair() {
    if (far >= 0) ::close(far);
  }
  void Send(std::string_view bytes) const {
    EXPECT_EQ(::send(far, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  tcp::socket near;
  int far = -1;
};

// Runs `io` until `done` or 5 s.
void RunUntil(asio::io_context& io, const bool& done) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  io.restart();
  while (!done && std::chrono::steady_clock::now() < until) io.run_for(10ms);
}

// Starts WaitReadable on `socket` and runs `io` until it completes or 5 s pass: the wait's
// error code, or nullopt if it never completed.
std::optional<error_code> WaitAndRun(asio::io_context& io, tcp::socket& socket) {
  std::optional<error_code> result;
  bool done = false;
  WaitReadable(socket, [&](error_code e) {
    result = e;
    done = true;
  });
  RunUntil(io, done);
  return result;
}

// A pair on a one-thread context, its near end watched for the peer's end (which lets a read
// that returns bytes count as draining it), and a 16-byte buffer to read its near end into.
class QuietWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bool watched = false;
    asio::post(io, [&] { watched = WatchPeerEnd(pair.near); });  // on the context's thread
    io.run();
    io.restart();
    ASSERT_TRUE(watched);
  }
  std::size_t Read() { return ReadSome(pair.near, asio::buffer(buf), ec); }
  // The reactor takes in the edges there are, with no operation to give them to (a timer keeps
  // it running).
  void TakeInEdges() {
    asio::steady_timer keep(io, 100ms);
    keep.async_wait([](error_code) {});
    io.restart();
    io.run();
  }
  std::optional<error_code> Wait() { return WaitAndRun(io, pair.near); }

  asio::io_context io{1};
  Pair pair{io};
  std::array<char, 16> buf{};
  error_code ec;
};

TEST_F(QuietWaitTest, AReadThatTakesAllThereIsLetsTheNextWaitQueueAndNewBytesStillWakeIt) {
  // Adopted from outside the context, then watched: the watch's registration change counts it
  // drained (epoll reports a changed registration again for whatever is there).
  EXPECT_TRUE(KnownDrained(pair.near));
  pair.Send("abc");
  TakeInEdges();
  EXPECT_FALSE(KnownDrained(pair.near));
  // Blocking or not as Asio holds it, ReadSome never waits.
  EXPECT_EQ(Read(), 3u);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(KnownDrained(pair.near));  // fewer bytes than asked: all there was

  bool woke = false;
  error_code wait_ec = asio::error::in_progress;
  WaitReadable(pair.near, [&](error_code e) {
    wait_ec = e;
    woke = true;
  });
  io.run_for(100ms);
  EXPECT_FALSE(woke);  // nothing there: the wait is queued

  pair.Send("d");
  RunUntil(io, woke);
  ASSERT_TRUE(woke);
  EXPECT_FALSE(wait_ec) << wait_ec.message();
  EXPECT_FALSE(KnownDrained(pair.near));  // the edge said bytes may be there
  EXPECT_EQ(Read(), 1u);
  EXPECT_EQ(buf[0], 'd');
}

TEST_F(QuietWaitTest, BytesThatComeBetweenTheReadAndTheWaitCompleteTheWait) {
  pair.Send("abc");
  ASSERT_EQ(Read(), 3u);
  ASSERT_TRUE(KnownDrained(pair.near));
  pair.Send("later");  // its edge is waiting in the epoll set; the reactor has not run
  EXPECT_EQ(Wait(), error_code{});
  EXPECT_EQ(Read(), 5u);
  EXPECT_EQ(std::string(buf.data(), 5), "later");
}

TEST_F(QuietWaitTest, AnEdgeTheReactorTookInBeforeTheWaitCompletesItAtOnce) {
  Read();
  ASSERT_TRUE(KnownDrained(pair.near));
  pair.Send("x");
  TakeInEdges();
  EXPECT_FALSE(KnownDrained(pair.near));
  EXPECT_EQ(Wait(), error_code{});
  EXPECT_EQ(Read(), 1u);
}

TEST_F(QuietWaitTest, AReadThatFillsTheBufferDoesNotAssumeTheSocketDrained) {
  pair.Send("0123456789abcdefXYZ");
  TakeInEdges();
  ASSERT_EQ(Read(), 16u);
  EXPECT_FALSE(KnownDrained(pair.near));
  // So the wait completes at once, and the rest is read.
  EXPECT_EQ(Wait(), error_code{});
  EXPECT_EQ(Read(), 3u);
  EXPECT_TRUE(KnownDrained(pair.near));
  // Nothing left: would_block, and still drained.
  EXPECT_EQ(Read(), 0u);
  EXPECT_EQ(ec, asio::error::would_block);
  EXPECT_TRUE(KnownDrained(pair.near));
}

TEST_F(QuietWaitTest, TheEndOfThePeerWakesAWaitAndReadsAsEof) {
  EXPECT_EQ(Read(), 0u);
  EXPECT_EQ(ec, asio::error::would_block);
  ::close(pair.far);  // its FIN comes after the read found nothing
  pair.far = -1;
  EXPECT_EQ(Wait(), error_code{});
  EXPECT_EQ(Read(), 0u);
  EXPECT_EQ(ec, asio::error::eof);
}

TEST_F(QuietWaitTest, ClosingTheSocketEndsAQueuedWaitWithOperationAborted) {
  Read();
  ASSERT_TRUE(KnownDrained(pair.near));
  asio::post(io, [&] { pair.near.close(); });  // runs once the wait below is queued
  EXPECT_EQ(Wait(), asio::error::operation_aborted);
  // A closed socket reads as such, and never counts as drained.
  EXPECT_EQ(Read(), 0u);
  EXPECT_EQ(ec, asio::error::bad_descriptor);
  EXPECT_FALSE(KnownDrained(pair.near));
}

TEST(SocketsTest, ADescriptorAdoptedByTheContextsOnlyThreadIsKnownDrainedYetAGreetingWakesIt) {
  // Adopted where the reactor cannot have taken in its registration's event yet, a socket needs
  // no read to be known empty; a greeting already there still completes the first wait.
  asio::io_context io(1);
  Listening server;
  int far = -1;
  const int fd = server.AcceptAfter("hi", /*end=*/false, far);
  ASSERT_GE(fd, 0);
  tcp::socket near(io);
  bool drained = false;
  bool woke = false;
  asio::post(io, [&] {
    ASSERT_FALSE(Adopt(near, tcp::v4(), fd));
    drained = KnownDrained(near);
    WaitReadable(near, [&](error_code) { woke = true; });
  });
  RunUntil(io, woke);
  EXPECT_TRUE(drained);
  EXPECT_TRUE(woke);
  std::array<char, 16> buf{};
  error_code ec;
  EXPECT_EQ(ReadSome(near, asio::buffer(buf), ec), 2u);
  ::close(far);
}

TEST(SocketsTest, AdoptionKnowsTheSocketDrainedOnlyOnTheOneThreadOfItsOwnContext) {
  // On a strand of a one-thread context, run by that thread: drained.
  asio::io_context io(1);
  asio::io_context other(1);
  Listening server;
  std::vector<int> fars;
  const auto accepted = [&] {
    const int far = server.Connect();
    EXPECT_GE(far, 0);
    fars.push_back(far);
    return server.Accept();
  };
  const asio::any_io_executor strand = asio::make_strand(io);
  tcp::socket on_strand(strand);
  tcp::socket elsewhere(other);  // adopted by a thread that runs `io`, not `other`
  std::optional<bool> strand_drained, elsewhere_drained;
  asio::post(strand, [&] {
    ASSERT_FALSE(Adopt(on_strand, tcp::v4(), accepted()));
    strand_drained = KnownDrained(on_strand);
    ASSERT_FALSE(Adopt(elsewhere, tcp::v4(), accepted()));
    elsewhere_drained = KnownDrained(elsewhere);
  });
  io.run_for(1s);
  EXPECT_EQ(strand_drained, true);
  EXPECT_EQ(elsewhere_drained, false);
  // A context any number of threads may run: never assumed.
  asio::io_context shared;
  tcp::socket on_shared(shared);
  std::optional<bool> shared_drained;
  asio::post(shared, [&] {
    ASSERT_FALSE(Adopt(on_shared, tcp::v4(), accepted()));
    shared_drained = KnownDrained(on_shared);
  });
  shared.run_for(1s);
  EXPECT_EQ(shared_drained, false);
  for (const int far : fars) ::close(far);
}

// Bytes sent at random moments from another thread, each answered, while the socket's context
// runs on `threads` threads: a wait that lost an edge would stop the exchange.
void PingPong(int threads) {
  asio::io_context io(threads == 1 ? 1 : BOOST_ASIO_CONCURRENCY_HINT_DEFAULT);
  Pair pair(io);
  constexpr int kRounds = 2000;
  std::atomic<int> answered{0};
  std::function<void()> serve = [&] {
    std::array<char, 64> buf{};
    while (true) {
      error_code ec;
      const std::size_t n = ReadSome(pair.near, asio::buffer(buf), ec);
      if (ec == asio::error::would_block) break;
      if (ec) return;
      for (std::size_t i = 0; i < n; ++i) {
        ::send(pair.near.native_handle(), "!", 1, MSG_NOSIGNAL);
        answered.fetch_add(1);
      }
    }
    WaitReadable(pair.near, [&](error_code ec) {
      if (!ec) serve();
    });
  };
  asio::post(io, serve);
  auto guard = asio::make_work_guard(io);
  std::vector<std::thread> runners;
  for (int i = 0; i < threads; ++i) runners.emplace_back([&] { io.run(); });
  std::minstd_rand random(42);
  char reply = 0;
  int got = 0;
  for (int i = 0; i < kRounds; ++i) {
    // Now and then a second byte right behind the first, to land between a read and a wait.
    const int burst = random() % 4 == 0 ? 2 : 1;
    for (int b = 0; b < burst; ++b) pair.Send("x");
    for (int b = 0; b < burst; ++b) {
      pollfd p{pair.far, POLLIN, 0};
      if (::poll(&p, 1, 5000) != 1) break;  // an answer lost: the round fails below
      got += static_cast<int>(::recv(pair.far, &reply, 1, 0));
    }
    if (random() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(random() % 200));
  }
  EXPECT_GE(got, kRounds);
  asio::post(io, [&] { pair.near.close(); });
  guard.reset();
  for (auto& t : runners) t.join();
  EXPECT_EQ(answered.load(), got);
}

TEST(SocketsTest, QuietWaitsLoseNoEdgeOnAContextsOnlyThread) { PingPong(1); }

TEST(SocketsTest, QuietWaitsLoseNoEdgeWhenTwoThreadsRunTheContext) { PingPong(2); }

// The peer's end (WatchPeerEnd, ReadSome's end_follows), read on the one thread of the pair's
// context: what each read in `reads` returned, once a wait says bytes are there before each.
class PeerEndTest : public ::testing::Test {
 protected:
  struct Got {
    std::size_t n;
    bool end_follows;
    error_code ec;
  };
  // On the context's thread: watches `socket` (the pair's near end by default).
  bool Watch(tcp::socket* socket = nullptr) {
    tcp::socket& s = socket ? *socket : pair.near;
    bool done = false;
    asio::post(io, [&] {
      watched = WatchPeerEnd(s);
      done = true;
    });
    RunUntil(io, done);
    return watched;
  }
  // On the context's thread: waits and reads `reads` times.
  std::vector<Got> WaitRead(int reads, tcp::socket* socket = nullptr) {
    tcp::socket& s = socket ? *socket : pair.near;
    std::vector<Got> got;
    bool done = false;
    asio::post(io, [&] { ReadNext(s, reads, got, done); });
    RunUntil(io, done);
    EXPECT_TRUE(done);
    return got;
  }
  void ReadNext(tcp::socket& s, int left, std::vector<Got>& got, bool& done) {
    if (left == 0) {
      done = true;
      return;
    }
    WaitReadable(s, [&, left](error_code) {
      Got g{};
      g.n = ReadSome(s, asio::buffer(buf), g.ec, &g.end_follows);
      got.push_back(g);
      ReadNext(s, left - 1, got, done);
    });
  }
  void EndFar() { ::shutdown(pair.far, SHUT_WR); }

  asio::io_context io{1};
  Pair pair{io};  // not watched until Watch()
  std::array<char, 16> buf{};
  bool watched = false;
};

TEST_F(PeerEndTest, TheLastBytesBeforeThePeersEndSaySoAndTheNextReadIsTheEnd) {
  ASSERT_TRUE(Watch());
  pair.Send("bye");
  EndFar();
  const std::vector<Got> got = WaitRead(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].n, 3u);
  EXPECT_TRUE(got[0].end_follows);
  EXPECT_EQ(got[1].n, 0u);
  EXPECT_EQ(got[1].ec, asio::error::eof);
}

TEST_F(PeerEndTest, BytesWithoutTheEndDoNotSaySo) {
  ASSERT_TRUE(Watch());
  pair.Send("abc");
  std::vector<Got> got = WaitRead(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].n, 3u);
  EXPECT_FALSE(got[0].end_follows);
  pair.Send("de");
  EndFar();
  got = WaitRead(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].n, 2u);
  EXPECT_TRUE(got[0].end_follows);
}

TEST_F(PeerEndTest, AReadThatFillsTheBufferIsNotTheLastEvenWithTheEndReported) {
  ASSERT_TRUE(Watch());
  pair.Send("0123456789abcdefXYZ");
  EndFar();
  const std::vector<Got> got = WaitRead(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].n, 16u);
  EXPECT_FALSE(got[0].end_follows);  // more may follow before the end
  EXPECT_EQ(got[1].n, 3u);
  EXPECT_TRUE(got[1].end_follows);
}

TEST_F(PeerEndTest, AnUnwatchedSocketNeverSaysSoYetItsEndTakenWithTheLastBytesStillWakes) {
  // The read that returns the last bytes consumes the FIN behind them, and no edge follows: the
  // next wait must not queue on a socket taken for drained.
  pair.Send("bye");
  EndFar();
  const std::vector<Got> got = WaitRead(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].n, 3u);
  EXPECT_FALSE(got[0].end_follows);
  EXPECT_FALSE(KnownDrained(pair.near));
  EXPECT_EQ(got[1].ec, asio::error::eof);
}

TEST_F(PeerEndTest, AWatchedSocketsEndTakenWithTheLastBytesWakesTheNextWait) {
  // Bytes and end there before the watch: the reactor's report of them may predate it (no
  // EPOLLRDHUP in it), and the read that takes them takes the end. The watch's registration
  // change has the socket reported again, so the next wait still completes.
  pair.Send("bye");
  EndFar();
  ASSERT_TRUE(Watch());
  const std::vector<Got> got = WaitRead(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].n, 3u);
  EXPECT_EQ(got[1].ec, asio::error::eof);  // the wait before it completed
}

TEST_F(PeerEndTest, AShortReadOnAnUnwatchedSocketIsNotTakenForDrainedButEagainIs) {
  pair.Send("abc");
  std::vector<Got> got = WaitRead(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].n, 3u);
  EXPECT_FALSE(KnownDrained(pair.near));  // the end may have come with the bytes
  error_code ec;
  EXPECT_EQ(ReadSome(pair.near, asio::buffer(buf), ec), 0u);
  EXPECT_EQ(ec, asio::error::would_block);
  EXPECT_TRUE(KnownDrained(pair.near));
}

TEST_F(PeerEndTest, OnlyTheContextsOneThreadMayWatch) {
  EXPECT_FALSE(WatchPeerEnd(pair.near));  // this thread does not run `io`
  pair.Send("bye");
  EndFar();
  // (Refused, the socket reads as unwatched.)
  error_code read_ec;
  bool end_follows = true;
  io.run_for(100ms);  // lets the reactor take the event in
  EXPECT_EQ(ReadSome(pair.near, asio::buffer(buf), read_ec, &end_follows), 3u);
  EXPECT_FALSE(end_follows);
}

TEST_F(PeerEndTest, ARecordLeftByAWatchedSocketThatEndedSaysNothingOfTheNextOne) {
  ASSERT_TRUE(Watch());
  pair.Send("x");
  EndFar();
  ASSERT_TRUE(WaitRead(1).at(0).end_follows);
  pair.near.close();  // the reactor's record of it goes back to the reactor's pool ...
  Pair next(io);      // ... and is likely the next socket's
  ASSERT_TRUE(Watch(&next.near));
  next.Send("y");
  std::vector<Got> got = WaitRead(1, &next.near);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].n, 1u);
  EXPECT_FALSE(got[0].end_follows);
}

TEST_F(PeerEndTest, ASocketRegisteredForThePeersEndIsWatchedFromItsAdoption) {
  Pair registered(io, {.peer_end = true});
  EXPECT_NE(RegisteredEvents(registered.near) & EPOLLRDHUP, 0u);
  ASSERT_TRUE(Watch(&registered.near));  // (nothing left to change)
  registered.Send("abc");
  std::vector<Got> got = WaitRead(1, &registered.near);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].n, 3u);
  EXPECT_FALSE(got[0].end_follows);
  registered.Send("de");
  ::shutdown(registered.far, SHUT_WR);
  got = WaitRead(2, &registered.near);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].n, 2u);
  EXPECT_TRUE(got[0].end_follows);
  EXPECT_EQ(got[1].ec, asio::error::eof);
}

TEST(SocketsTest, BytesAndEndThereBeforeTheRegistrationStillEndTheNextWait) {
  // Adopted on the context's thread (known drained at once), registered for its end: the
  // registration's own report carries both, and the read that takes the bytes says they are
  // the last.
  asio::io_context io(1);
  Listening server;
  int far = -1;
  const int fd = server.AcceptAfter("bye", /*end=*/true, far);
  ASSERT_GE(fd, 0);
  tcp::socket near(io);
  std::array<char, 16> buf{};
  std::vector<std::pair<std::size_t, bool>> reads;
  error_code last;
  bool done = false;
  asio::post(io, [&] {
    ASSERT_FALSE(Adopt(near, tcp::v4(), fd, {.peer_end = true}));
    EXPECT_TRUE(KnownDrained(near));
    WaitReadable(near, [&](error_code) {
      bool end = false;
      error_code ec;
      reads.emplace_back(ReadSome(near, asio::buffer(buf), ec, &end), end);
      WaitReadable(near, [&](error_code) {
        ReadSome(near, asio::buffer(buf), last);
        done = true;
      });
    });
  });
  RunUntil(io, done);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0], std::make_pair(std::size_t{3}, true));
  EXPECT_EQ(last, asio::error::eof);
  ::close(far);
}

TEST_F(PeerEndTest, ARecordLeftByAWatchedSocketSaysNothingOfTheNextOneRegisteredForItsEnd) {
  ASSERT_TRUE(Watch());
  pair.Send("x");
  EndFar();
  ASSERT_TRUE(WaitRead(1).at(0).end_follows);
  pair.near.close();                  // the reactor's record of it goes back to the pool ...
  Pair next(io, {.peer_end = true});  // ... and is likely the next socket's
  next.Send("y");
  std::vector<Got> got = WaitRead(1, &next.near);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].n, 1u);
  EXPECT_FALSE(got[0].end_follows);
}

TEST(SocketsTest, AConnectIsRegisteredOnceForWritabilityAndThePeersEnd) {
  Listening server;
  asio::io_context io(1);
  tcp::socket socket(io);
  ASSERT_FALSE(RunConnectInside(io, socket, server.endpoint));
  EXPECT_EQ(RegisteredEvents(socket) & (EPOLLIN | EPOLLOUT | EPOLLRDHUP),
            static_cast<std::uint32_t>(EPOLLIN | EPOLLOUT | EPOLLRDHUP));
}

TEST(SocketsTest, AConnectedSocketWatchesThePeersEndWithoutAChangeOfItsOwn) {
  // Connect's wait for writability carried EPOLLRDHUP into the registration.
  Listening server;
  asio::io_context io(1);
  tcp::socket socket(io);
  ASSERT_FALSE(RunConnectInside(io, socket, server.endpoint));
  const int peer = ::accept4(server.fd, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(peer, 0);
  ASSERT_EQ(::send(peer, "end", 3, MSG_NOSIGNAL), 3);
  ::shutdown(peer, SHUT_WR);
  std::optional<bool> watched, end_follows;
  std::array<char, 16> buf{};
  asio::post(io, [&] {
    watched = WatchPeerEnd(socket);
    WaitReadable(socket, [&](error_code) {
      error_code ec;
      bool end = false;
      EXPECT_EQ(ReadSome(socket, asio::buffer(buf), ec, &end), 3u);
      end_follows = end;
    });
  });
  io.restart();
  io.run_for(2s);
  EXPECT_EQ(watched, true);
  EXPECT_EQ(end_follows, true);
  ::close(peer);
}

// All `far` holds now, read without waiting.
std::string Drain(int far) {
  std::string got;
  std::array<char, 65536> buf{};
  while (true) {
    ::pollfd p{far, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) break;
    const ssize_t n = ::recv(far, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n <= 0) break;
    got.append(buf.data(), static_cast<std::size_t>(n));
  }
  return got;
}

TEST(WriteSomeTest, OnePieceSmallPiecesAndLargePiecesArriveWholeAndInOrder) {
  asio::io_context io;
  Pair pair(io);
  error_code ec;
  // One piece (one send).
  const std::string one = "HTTP/1.1 200 OK\r\n\r\n";
  const asio::const_buffer single = asio::buffer(one);
  EXPECT_EQ(WriteSome(pair.near, {&single, 1}, ec), one.size());
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(Drain(pair.far), one);
  // Small pieces, empty ones among them (joined into one send).
  const std::array<asio::const_buffer, 4> small = {asio::buffer("head;", 5), asio::const_buffer(),
                                                   asio::buffer("a", 1), asio::buffer("bc", 2)};
  EXPECT_EQ(WriteSome(pair.near, small, ec), 8u);
  EXPECT_EQ(Drain(pair.far), "head;abc");
  // Pieces together past kCoalescedWrite (gathered).
  const std::string a(kCoalescedWrite, 'a'), b(100, 'b');
  const std::array<asio::const_buffer, 2> large = {asio::buffer(a), asio::buffer(b)};
  EXPECT_EQ(WriteSome(pair.near, large, ec), a.size() + b.size());
  EXPECT_EQ(Drain(pair.far), a + b);
  // Nothing to write is no write.
  EXPECT_EQ(WriteSome(pair.near, {}, ec), 0u);
  EXPECT_FALSE(ec);
}

TEST(WriteSomeTest, AFullSocketTakesPartThenAnswersWouldBlock) {
  asio::io_context io;
  Pair pair(io);
  const int small = 4096;
  ::setsockopt(pair.near.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  ::setsockopt(pair.far, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  const std::string chunk(64 * 1024, 'x');
  const std::array<asio::const_buffer, 2> pieces = {asio::buffer(chunk), asio::buffer(chunk)};
  error_code ec;
  std::size_t total = 0;
  for (int i = 0; i < 64 && !ec; ++i) total += WriteSome(pair.near, pieces, ec);
  EXPECT_EQ(ec, asio::error::would_block);
  EXPECT_GT(total, 0u);
  EXPECT_LT(total, 64 * pieces.size() * chunk.size());
}

TEST(WriteSomeTest, APeerThatIsGoneIsAnErrorNotASignal) {
  asio::io_context io;
  Pair pair(io);
  const linger reset{1, 0};  // close with a reset
  ::setsockopt(pair.far, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  ::close(pair.far);
  pair.far = -1;
  std::this_thread::sleep_for(20ms);
  const asio::const_buffer piece = asio::buffer("late", 4);
  error_code ec;
  for (int i = 0; i < 3 && !ec; ++i) WriteSome(pair.near, {&piece, 1}, ec);  // (no SIGPIPE)
  EXPECT_TRUE(ec == asio::error::connection_reset || ec == asio::error::broken_pipe)
      << ec.message();
}

}  // namespace
}  // namespace drover::net
