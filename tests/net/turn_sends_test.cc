// TurnSends: sends held to the end of the loop's turn and made together, over real loopback
// sockets -- nothing leaves before the turn's other handlers ran, each waiter gets what send(2)
// would have given it, what cannot be gathered comes back unsent, a waiter may send again at once,
// and a loop destroyed with waiters ends their coroutines.
// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include "net/turn_sends.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace drover::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// A connected pair over loopback, both on `io`.
struct Pair {
  tcp::socket sender, receiver;
};
Pair Connected(asio::io_context& io) {
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket sender(io);
  sender.connect(acceptor.local_endpoint());
  tcp::socket receiver = acceptor.accept();
  return Pair{std::move(sender), std::move(receiver)};
}

std::string ReadAvailable(tcp::socket& s) {
  std::string got;
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(s.native_handle(), buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

class TurnSendsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sends_ = TurnSends::ForThisThread();
    if (sends_ == nullptr) {
      GTEST_SKIP() << "no io_uring for this process (kernel, sandbox or DROVER_IO_URING=off): "
                      "the gateway writes each answer after a post, as its tests show";
    }
  }
  TurnSends* sends_ = nullptr;
};

TEST_F(TurnSendsTest, SendsAwaitedInOneTurnLeaveTogetherAfterItsOtherHandlers) {
  asio::io_context io;
  constexpr int kSockets = 40;
  std::vector<Pair> pairs;
  for (int i = 0; i < kSockets; ++i) pairs.push_back(Connected(io));
  std::vector<long> results(kSockets, 0);
  int late_handler_saw = -1;  // what had arrived when a handler posted behind the sends ran
  for (int i = 0; i < kSockets; ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          const std::string text = "answer " + std::to_string(i);
          const asio::const_buffer pieces[] = {asio::buffer(text.data(), 6),
                                               asio::buffer(text.data() + 6, text.size() - 6)};
          results[i] = co_await sends_->Send(pairs[i].sender, pieces);
        },
        asio::detached);
  }
  // Posted before the coroutines ran: it runs before the round that sends, in the same turn.
  asio::post(io, [&] {
    late_handler_saw = 0;
    for (Pair& p : pairs) late_handler_saw += !ReadAvailable(p.receiver).empty();
  });
  io.run();
  EXPECT_EQ(late_handler_saw, 0) << "a send left before the turn's other handlers ran";
  for (int i = 0; i < kSockets; ++i) {
    const std::string text = "answer " + std::to_string(i);
    EXPECT_EQ(results[i], static_cast<long>(text.size()));
    EXPECT_EQ(ReadAvailable(pairs[i].receiver), text);
  }
}

TEST_F(TurnSendsTest, WhatCannotBeGatheredComesBackUnsentAndAFailedPeerReportsItsError) {
  asio::io_context io;
  Pair big = Connected(io);
  Pair closing = Connected(io);
  Pair reset = Connected(io);
  Pair good = Connected(io);
  // The reset pair's peer closed with a byte unread: the kernel answered with a reset.
  ASSERT_EQ(::send(reset.sender.native_handle(), "y", 1, 0), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  reset.receiver.close();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string too_big(kCoalescedWrite + 1, 'b');
  std::optional<long> big_result, closed_result, reset_result, good_result;
  auto send = [&](tcp::socket& s, const std::string& text, std::optional<long>& out) {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          const asio::const_buffer piece = asio::buffer(text);
          out = co_await sends_->Send(s, {&piece, 1});
        },
        asio::detached);
  };
  const std::string small = "fine";
  send(big.sender, too_big, big_result);
  send(closing.sender, small, closed_result);
  send(reset.sender, small, reset_result);
  send(good.sender, small, good_result);
  asio::post(io, [&] { closing.sender.close(); });  // while its send waits for the turn's end
  io.run();
  ASSERT_TRUE(big_result && closed_result && reset_result && good_result);
  EXPECT_EQ(*big_result, TurnSends::kNotSent);
  EXPECT_EQ(ReadAvailable(big.receiver), "");
  EXPECT_EQ(*closed_result, TurnSends::kNotSent);
  EXPECT_TRUE(*reset_result == -ECONNRESET || *reset_result == -EPIPE) << *reset_result;
  EXPECT_EQ(*good_result, 4);
  EXPECT_EQ(ReadAvailable(good.receiver), "fine");
}

TEST_F(TurnSendsTest, AFullSocketTakesPartThenNothingBesideOneWithRoom) {
  asio::io_context io;
  Pair full = Connected(io);
  Pair good = Connected(io);
  full.sender.set_option(asio::socket_base::send_buffer_size(4096));
  full.receiver.set_option(asio::socket_base::receive_buffer_size(4096));
  const std::string chunk(kCoalescedWrite, 'f');
  std::vector<long> full_results;
  long good_result = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // Each send waits for its own turn's end; the socket fills and then takes nothing.
        for (int i = 0; i < 400; ++i) {
          const asio::const_buffer piece = asio::buffer(chunk);
          const long r = co_await sends_->Send(full.sender, {&piece, 1});
          full_results.push_back(r);
          if (r == -EAGAIN) break;
        }
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const asio::const_buffer piece = asio::buffer(std::string_view("room"));
        good_result = co_await sends_->Send(good.sender, {&piece, 1});
      },
      asio::detached);
  io.run();
  ASSERT_FALSE(full_results.empty());
  EXPECT_EQ(full_results.back(), -EAGAIN) << "the socket never filled";
  long taken = 0;
  for (const long r : full_results) {
    if (r > 0) taken += r;
  }
  EXPECT_GT(taken, 0);
  EXPECT_EQ(static_cast<long>(ReadAvailable(full.receiver).size()), taken);
  EXPECT_EQ(good_result, 4);
  EXPECT_EQ(ReadAvailable(good.receiver), "room");
}

TEST_F(TurnSendsTest, ALoopDestroyedWithWaitersEndsTheirCoroutines) {
  auto frame_alive = std::make_shared<int>(0);
  std::weak_ptr<int> seen = frame_alive;
  {
    asio::io_context io;
    Pair link = Connected(io);  // (its receiver stays open: the send is never made)
    bool started = false;
    bool resumed = false;
    asio::co_spawn(
        io,
        [&, held = std::move(frame_alive)]() -> asio::awaitable<void> {
          const asio::const_buffer piece = asio::buffer(std::string_view("never"));
          started = true;
          co_await sends_->Send(link.sender, {&piece, 1});
          resumed = true;
        },
        asio::detached);
    // The coroutine starts and waits; the round that would send is left unrun.
    while (!started) io.run_one();
    EXPECT_FALSE(resumed);
    EXPECT_FALSE(seen.expired());
  }  // the io_context goes with the round unrun
  EXPECT_TRUE(seen.expired()) << "the waiting coroutine's frame outlived its loop";
  // The thread's TurnSends works on for the next loop.
  asio::io_context io;
  Pair link = Connected(io);
  long result = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const asio::const_buffer piece = asio::buffer(std::string_view("again"));
        result = co_await sends_->Send(link.sender, {&piece, 1});
      },
      asio::detached);
  io.run();
  EXPECT_EQ(result, 5);
  EXPECT_EQ(ReadAvailable(link.receiver), "again");
}

// A plain caller's waiter: what it was told.
struct Told final : TurnSends::Waiter {
  void Sent(long r, std::span<const char> bytes) override {
    result = r;
    given = std::string(bytes.data(), bytes.size());
  }
  void Dropped() override { dropped = true; }
  std::optional<long> result;
  std::string given;
  bool dropped = false;
};

TEST_F(TurnSendsTest, APlainCallerIsToldAtTheTurnsEndWithItsBytesOrThatTheLoopWentFirst) {
  Told told, told_too;
  {
    asio::io_context io;
    Pair link = Connected(io);
    asio::post(io, [&] {
      sends_->Send(link.sender, std::string_view("plain"), told);
      EXPECT_FALSE(told.result) << "told before the turn ended";
    });
    io.run();
    ASSERT_TRUE(told.result);
    EXPECT_EQ(*told.result, 5);
    EXPECT_EQ(told.given, "plain");
    EXPECT_EQ(ReadAvailable(link.receiver), "plain");
    EXPECT_FALSE(told.dropped);
    sends_->Send(link.sender, std::string_view("never"), told_too);
  }  // the loop goes with the round unrun
  EXPECT_TRUE(told_too.dropped);
  EXPECT_FALSE(told_too.result);
}

}  // namespace
}  // namespace drover::net
