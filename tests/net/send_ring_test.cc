// SendRing: many non-blocking sends in one system call, over real loopback sockets -- each send
// reports what send(2) would have (all taken, part, no room, the peer gone, a bad descriptor),
// one's failure does not stop the others, and a batch larger than the ring goes whole.
#include "net/send_ring.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>
#include <vector>

namespace drover::net {
namespace {

// A connected pair of loopback TCP sockets: {the sender's, the receiver's}.
std::pair<int, int> Connected() {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  EXPECT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  EXPECT_EQ(::listen(listener, 1), 0);
  EXPECT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len), 0);
  const int sender = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::connect(sender, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  const int receiver = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(listener);
  return {sender, receiver};
}

std::string ReadAvailable(int fd) {
  std::string got;
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

class SendRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ring_ = SendRing::ForThisThread();
    if (ring_ == nullptr) {
      GTEST_SKIP() << "no io_uring for this process (kernel, sandbox or DROVER_IO_URING=off): "
                      "the HTTP server sends one chunk per system call, as its stream tests show";
    }
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }
  std::pair<int, int> Pair() {
    auto p = Connected();
    fds_.push_back(p.first);
    fds_.push_back(p.second);
    return p;
  }

  SendRing* ring_ = nullptr;
  std::vector<int> fds_;
};

TEST_F(SendRingTest, TheSameThreadGetsTheSameRing) { EXPECT_EQ(SendRing::ForThisThread(), ring_); }

// More sends than the ring holds at once (it goes round again), each to its own socket, each
// with its own bytes.
TEST_F(SendRingTest, EverySendOfABatchLargerThanTheRingArrivesWhole) {
  const std::size_t count = SendRing::kEntries * 2 + 17;
  std::vector<std::pair<int, int>> pairs;
  std::vector<std::string> texts;
  std::vector<SendRing::Send> sends;
  for (std::size_t i = 0; i < count; ++i) {
    pairs.push_back(Pair());
    texts.push_back("chunk " + std::to_string(i) + std::string(i % 300, '.'));
  }
  for (std::size_t i = 0; i < count; ++i) {
    sends.push_back({pairs[i].first, texts[i].data(), texts[i].size()});
  }
  ring_->SendAll(sends);
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(sends[i].result, static_cast<long>(texts[i].size())) << i;
    ASSERT_EQ(ReadAvailable(pairs[i].second), texts[i]) << i;
  }
}

// A socket without room: the send takes what fits (or reports -EAGAIN when nothing does) and
// never waits; the sends beside it go as usual.
TEST_F(SendRingTest, ASocketWithoutRoomTakesPartOrNothingAndTheOthersGo) {
  const auto full = Pair();
  const auto fine = Pair();
  const int small = 4096;
  ::setsockopt(full.first, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  ::setsockopt(full.second, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  const std::string big(4 * 1024 * 1024, 'b');
  const std::string hello = "hello";
  std::vector<SendRing::Send> sends = {{full.first, big.data(), big.size()},
                                       {fine.first, hello.data(), hello.size()}};
  ring_->SendAll(sends);
  ASSERT_GT(sends[0].result, 0);
  EXPECT_LT(sends[0].result, static_cast<long>(big.size()));
  EXPECT_EQ(sends[1].result, 5);
  // Soon nothing fits at all (the first sends still move into the receiver's buffer).
  sends.resize(1);
  for (int i = 0; i < 100 && sends[0].result != -EAGAIN; ++i) {
    ring_->SendAll(sends);
    ASSERT_TRUE(sends[0].result > 0 || sends[0].result == -EAGAIN) << sends[0].result;
  }
  EXPECT_EQ(sends[0].result, -EAGAIN);
  EXPECT_EQ(ReadAvailable(fine.second), hello);
}

// Failures are each send's own: a descriptor that is no socket, a peer that has gone.
TEST_F(SendRingTest, ASendThatFailsReportsItsErrorAndTheOthersGo) {
  const auto gone = Pair();
  const auto fine = Pair();
  const linger reset{1, 0};  // close with a reset: the sender's next send fails
  ::setsockopt(gone.second, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  ::close(gone.second);
  fds_.erase(std::find(fds_.begin(), fds_.end(), gone.second));
  int not_a_socket[2];
  ASSERT_EQ(::pipe(not_a_socket), 0);
  fds_.push_back(not_a_socket[0]);
  fds_.push_back(not_a_socket[1]);
  const std::string text = "text";
  std::vector<SendRing::Send> sends = {{gone.first, text.data(), text.size()},
                                       {not_a_socket[1], text.data(), text.size()},
                                       {-1, text.data(), text.size()},
                                       {fine.first, text.data(), text.size()}};
  ring_->SendAll(sends);
  EXPECT_TRUE(sends[0].result == -ECONNRESET || sends[0].result == -EPIPE) << sends[0].result;
  EXPECT_EQ(sends[1].result, -ENOTSOCK);
  EXPECT_EQ(sends[2].result, -EBADF);
  EXPECT_EQ(sends[3].result, 4);
  EXPECT_EQ(ReadAvailable(fine.second), text);
}

}  // namespace
}  // namespace drover::net
