// Sends held until the end of the event loop's turn and then made together, in one system call
// (SendRing): a proxy's loop reads everything a turn reported, then writes everything, as
// HAProxy's does -- and the writes of a turn cost one `io_uring_enter` instead of a `send` each
// (ARCHITECTURE, gateway speed, sixteenth pass).
#pragma once

// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <climits>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "net/send_ring.h"

namespace drover::net {

class TurnSends : public std::enable_shared_from_this<TurnSends> {
 public:
  // What Send() gives when it made no send: the pieces were empty or larger than kCoalescedWrite,
  // or the socket was closed while waiting. The caller writes them (or fails) its own way.
  static constexpr long kNotSent = LONG_MIN;

  // The calling thread's; null where the thread has no SendRing (no io_uring for this process,
  // a build without liburing, DROVER_IO_URING=off) -- then the caller writes at once, or after
  // a post of its own. For threads that each run one io_context alone (the gateway's workers):
  // a Send()'s coroutine must run on this thread's io_context, and that io_context on this thread
  // only.
  static TurnSends* ForThisThread();

  // Copies `pieces` (at most kCoalescedWrite bytes in all), waits until the handlers the loop
  // already holds have run -- the rest of this turn's reads -- and then sends them on `socket`,
  // together with every other Send() made on this thread meanwhile, in one submission. The result
  // is what `send(2)` with MSG_DONTWAIT would give: the bytes taken (perhaps fewer), -EAGAIN (no
  // room), another -errno (the connection failed); or kNotSent. The caller's coroutine resumes on
  // this thread; `socket` must outlive the wait (it may be closed meanwhile: kNotSent).
  boost::asio::awaitable<long> Send(boost::asio::ip::tcp::socket& socket,
                                    std::span<const boost::asio::const_buffer> pieces);

  // The same for a caller of plain handlers (`bytes`: at most kCoalescedWrite): `waiter` is told
  // at the turn's end, on this thread.
  class Waiter {
   public:
    // The send's result, as above, and the bytes it was given (valid during the call only: the
    // part not taken is the caller's to keep).
    virtual void Sent(long result, std::span<const char> bytes) = 0;
    // Instead of Sent(): the loop was destroyed first (let go of what the wait holds).
    virtual void Dropped() = 0;

   protected:
    ~Waiter() = default;
  };
  void Send(boost::asio::ip::tcp::socket& socket, std::span<const char> bytes, Waiter& waiter);

  explicit TurnSends(SendRing& ring) : ring_(ring) {}
  TurnSends(const TurnSends&) = delete;
  TurnSends& operator=(const TurnSends&) = delete;

 private:
  using Resume = boost::asio::detail::awaitable_handler<boost::asio::any_io_executor, long>;
  struct Entry {
    boost::asio::ip::tcp::socket* socket;
    std::size_t offset;  // in bytes
    std::size_t size;    // 0: nothing to send (kNotSent)
    long result;
    std::optional<Resume> resume;  // a coroutine's, or
    Waiter* waiter;                // a plain caller's
  };
  struct Batch {
    std::vector<Entry> entries;
    std::vector<char> bytes;
  };
  void Add(boost::asio::ip::tcp::socket& socket, std::span<const boost::asio::const_buffer> pieces,
           std::optional<Resume> resume, Waiter* waiter);
  // The end of the turn: sends what was added and resumes each waiter with its result.
  void SendAll();

  // A turn's bytes kept for the next one; more (a turn that wrote to thousands of connections) is
  // given back.
  static constexpr std::size_t kKeptBytes = 1 << 20;

  SendRing& ring_;
  Batch filling_, spare_;  // spare_ keeps the capacity of the batch last sent
  std::vector<SendRing::Send> sends_;
  std::vector<std::size_t> sent_;  // for each of sends_, its entry
  bool posted_ = false;            // SendAll is posted
};

}  // namespace drover::net
