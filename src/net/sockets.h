// Asio socket helpers every networked part shares: endpoints from "host:port", listening, taking
// a new descriptor into a socket, connecting, keepalive. Internal to the parts that already use
// Asio.
#pragma once

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/detail/reactive_wait_op.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/version.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover::net {

// "ip:port" (IPv4, or [IPv6]) as an endpoint, by common/host_port.h's rules; names are refused,
// since nothing here resolves them. Port 0 (any free port) only when `listening`.
Result<boost::asio::ip::tcp::endpoint> ParseEndpoint(std::string_view address,
                                                     std::string_view what, bool listening = false);

// `ip` as text, as `ip.to_string()` writes it; an IPv4 address without the sprintf that
// inet_ntop spends on it (the gateway writes its client's into every forwarded request).
std::string AddressText(const boost::asio::ip::address& ip);
// `endpoint` as "ip:port" (IPv4) or "[ip]:port" (IPv6): how a client's address is written in
// logs and counted by per-client limits.
std::string EndpointText(const boost::asio::ip::tcp::endpoint& endpoint);

// open + SO_REUSEADDR (+ SO_REUSEPORT: one of several listening sockets of this process on one
// address) + bind + listen; the first error, if any.
boost::system::error_code Listen(boost::asio::ip::tcp::acceptor& acceptor,
                                 const boost::asio::ip::tcp::endpoint& endpoint, int backlog,
                                 bool reuse_port = false);

// Takes `fd` into `socket` (closed; its executor picks the reactor): a stream socket of
// `protocol` opened non-blocking (accept4 or socket with SOCK_NONBLOCK) and never duplicated.
// Asio is told both, as it knows them of the sockets it opens itself, so neither costs a system
// call later: it would set O_NONBLOCK again (ioctl FIONBIO) before the first wait, and, taking
// any assigned descriptor for a possible duplicate, remove it from the epoll set (EPOLL_CTL_DEL)
// before closing it -- the kernel drops a closed descriptor that has no duplicate by itself.
// Synchronous operations still wait, as on any Asio socket, unless MarkNonBlocking() says
// otherwise. On error `fd` is closed.
//
// `also` asks the one registration (EPOLL_CTL_ADD) for more than Asio's own events, where each
// would otherwise cost an EPOLL_CTL_MOD of its own later: the peer's end (as WatchPeerEnd(), for
// a socket of a one-thread context read by that thread only), and, for a connect in progress,
// writability, which the socket is then known not to have yet (so that the wait for it goes
// to the reactor as it is). Other Boost versions and reactors register as Asio does
// (WatchPeerEnd() then says whether the socket is watched).
struct Registration {
  bool peer_end = false;
  bool connecting = false;
};
boost::system::error_code Adopt(boost::asio::ip::tcp::socket& socket,
                                const boost::asio::ip::tcp& protocol, int fd,
                                Registration also = {});

// `socket.non_blocking(true)` for a socket Adopt() or Connect() made, without the ioctl: its
// synchronous reads and writes answer would_block instead of waiting.
void MarkNonBlocking(boost::asio::ip::tcp::socket& socket);

// Waiting for bytes without a system call per wait.
//
// Asio's epoll reactor registers a descriptor once, edge-triggered, and keeps for it a flag that
// an edge may have come since a read last found the socket empty (Boost 1.74's
// epoll_reactor::descriptor_state::try_speculative_). Its async_wait ignores the flag and
// re-arms the registration (EPOLL_CTL_MOD) every time; its reads, while the flag is set, try the
// socket before queueing, which in a request-response exchange is a read that answers EAGAIN.
// Either way a wait cost one system call. ReadSome() clears the flag when its read leaves the
// receive queue empty, inside the reactor's lock for the descriptor, so no edge the reactor
// takes in can fall between the read and the clearing; WaitReadable() queues on the descriptor
// at no cost while the flag is clear, and completes at once while it is set. Edge triggering
// makes it sound: whatever arrives after the read raises a new edge, which sets the flag and
// completes the queued wait. The one thing a read can take without saying so is the peer's end
// (a read that returns the last bytes also consumes the FIN behind them, and no edge follows):
// a read that returned bytes counts as draining the socket only when WatchPeerEnd() lets the
// reactor's reports say that the end has not come yet; otherwise only a read that answers
// EAGAIN does. Asio's own operations keep working on such a socket (its reads then queue at once
// instead of trying). Other Boost versions and reactors get Asio's plain wait and read.

// Reads what is there into `buffer`, without waiting: the byte count; would_block when nothing
// is there, eof when the peer ended its side (0 bytes), else the error. A read that answers
// would_block, or (on a socket WatchPeerEnd() watches, its end not reported) fewer bytes than
// `buffer` holds, found the socket drained, and says so to the reactor (above). `end_follows`, if
// given, is set when the bytes read are the last: the socket was drained, WatchPeerEnd() returned
// true for it, and the reactor has reported the peer's end (its FIN came before the read, so the
// next read would answer eof).
std::size_t ReadSome(boost::asio::ip::tcp::socket& socket, boost::asio::mutable_buffer buffer,
                     boost::system::error_code& ec, bool* end_follows = nullptr);

// Writes what `socket` takes now of `pieces` (in order), without waiting: the byte count, or
// would_block when it takes nothing, or the error (a peer that reset is an error, not SIGPIPE).
// One piece is one send(); a few small ones (together at most kCoalescedWrite bytes) are copied
// into one buffer and sent with one send(); more go out gathered by sendmsg(). (perf on the HTTP
// keep-alive path: sendmsg's message-header and iovec copies cost about 3% of the proxy's CPU
// where send() costs none, and a head with a small body is two pieces.) `flags` are added to
// every call (MSG_MORE: the bytes wait for what follows, e.g. a FIN).
inline constexpr std::size_t kCoalescedWrite = 2048;
std::size_t WriteSome(boost::asio::ip::tcp::socket& socket,
                      std::span<const boost::asio::const_buffer> pieces,
                      boost::system::error_code& ec, int flags = 0);

// Has the reactor report the peer's end of its side (EPOLLRDHUP) with the socket's events, for
// ReadSome()'s `end_follows`: a relay that knows the last bytes are the last can send them with
// its own end (MSG_MORE, then shutdown: one segment where two and an ACK would go, and no read
// that answers eof). One EPOLL_CTL_MOD (none for a socket Connect() made: already watched), after
// which the socket counts as drained (epoll reports a modified registration again for whatever is
// ready). Called where the socket's reads run, one at a time: the only thread of the socket's
// one-thread context, or a handler of the strand that is the socket's executor -- and the caller
// reads the socket there only. (A context run by several threads reports events on any of them,
// unlocked; ReadSome's check after its read, under the descriptor's lock, either sees the report
// of an end or comes before the reactor's handling of it, which takes that lock and then marks
// the socket readable again. Two reads at once could each take the other's bytes unseen.) False
// (not watched, `end_follows` stays false) from anywhere else, or where unsupported.
bool WatchPeerEnd(boost::asio::ip::tcp::socket& socket);

// Calls `handler(error_code)` once bytes (or the peer's end, or an error) may be there to read,
// as `socket.async_wait(wait_read, handler)` does, but with no system call when ReadSome() last
// found the socket drained. A wait pending when the socket is closed or cancelled ends with
// operation_aborted. The socket needs Adopt(), Connect() or TcpListener to have made it.
template <typename Handler>
void WaitReadable(boost::asio::ip::tcp::socket& socket, Handler handler);

// Whether the reactor holds `socket` for drained: its next WaitReadable() queues without a
// system call, and a read would find nothing (unless bytes came since, whose edge completes
// that wait at once).
bool KnownDrained(boost::asio::ip::tcp::socket& socket);
// The events `socket` is registered for with the reactor (EPOLLIN, EPOLLOUT, EPOLLRDHUP, ...);
// 0 where unknown or not registered. For tests and diagnostics.
std::uint32_t RegisteredEvents(boost::asio::ip::tcp::socket& socket);

// Connects `socket` (closed; its executor picks the reactor) to `to`: a non-blocking socket(),
// connect(), the descriptor registered once for reads, writability and (see WatchPeerEnd) the
// peer's end, then a wait for writability that changes nothing in the registration, and
// SO_ERROR -- no ioctl, no EPOLL_CTL_MOD, and none of the poll() Asio's own connect adds; run by
// the only thread of a one-thread context, not even SO_ERROR unless the event that ended the
// wait marked the socket readable (a failure does). After `timeout` (> 0) the attempt ends with
// timed_out; closing `socket` meanwhile ends it with operation_aborted. On error `socket` is
// closed. EPOLLOUT stays in the descriptor's epoll registration after the wait.
boost::asio::awaitable<boost::system::error_code> Connect(boost::asio::ip::tcp::socket& socket,
                                                          const boost::asio::ip::tcp::endpoint& to,
                                                          std::chrono::nanoseconds timeout);
// Connect() for a caller without a coroutine: `done(error_code)` runs on the socket's executor
// when the attempt ends -- before StartConnect returns when it ends at once (a refused or
// completed loopback connect). `socket` must outlive the attempt.
template <typename Handler>
void StartConnect(boost::asio::ip::tcp::socket& socket, const boost::asio::ip::tcp::endpoint& to,
                  std::chrono::nanoseconds timeout, Handler done);

// Connect()'s and StartConnect()'s deadlines on `context` share one timer, which by default is
// cancelled whenever no connect is pending, so that the context's run() ends with its other
// work. For a context that runs until stopped (a work guard), this keeps it armed instead: under
// a stream of connects it is then re-armed about once per connect timeout, where each connect
// that follows a moment with none pending re-arms it (a timerfd_settime system call; 0.40 per
// proxied TCP session). After this call the context's run() can last until the latest deadline
// the timer was armed for.
void KeepConnectTimerArmed(boost::asio::execution_context& context);

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

// ---- The template bodies.

namespace internal {
// Connect's steps. BeginConnect: the socket and the non-blocking connect; `done` when the attempt
// ended at once (with `ec`).
struct ConnectStart {
  boost::system::error_code ec;
  bool done = false;
  bool event_tells = false;  // the readiness event alone tells success from failure
};
ConnectStart BeginConnect(boost::asio::ip::tcp::socket& socket,
                          const boost::asio::ip::tcp::endpoint& to);
// The attempt's time limit: cancels the socket's wait when it passes first. The deadlines of a
// one-thread context, armed on its thread, are watched by one timer (ConnectWatch, sockets.cc),
// not a timer each: an Asio timer that becomes the context's earliest reprograms the reactor's
// timerfd, a system call, and a connect's deadline usually is the earliest (perf stat: 0.40
// timerfd_settime per proxied TCP session with a timer each).
class ConnectWatch;
struct ConnectDeadline {
  ConnectDeadline() = default;
  ConnectDeadline(const ConnectDeadline&) = delete;
  ConnectDeadline& operator=(const ConnectDeadline&) = delete;
  ~ConnectDeadline();  // leaves the watch if still on it
  // Watched from now until Disarm() (no limit when `timeout` <= 0).
  void Arm(boost::asio::ip::tcp::socket& socket, std::chrono::nanoseconds timeout);
  // Off the watch (or its own timer cancelled): the wait has ended; `timed_out` then says whether
  // the deadline ended it.
  void Disarm();
  bool timed_out = false;         // set by the watch, which then cancelled the socket's wait
  ConnectWatch* owner = nullptr;  // the watch of the socket's context, once armed
  // Armed elsewhere than on the only thread of a one-thread context: a timer of its own on the
  // socket's executor instead (the watch ends a wait from whichever thread runs its timer).
  struct OwnTimer;
  std::shared_ptr<OwnTimer> own;
  // The watch's, under its lock.
  ConnectWatch* watch = nullptr;  // while on the watch
  ConnectDeadline* prev = nullptr;
  ConnectDeadline* next = nullptr;
  std::chrono::steady_clock::time_point at;
  boost::asio::ip::tcp::socket* waiting = nullptr;  // the socket whose wait it ends
};
// The end of the wait for writability: the attempt's outcome (the socket closed on error).
boost::system::error_code FinishConnect(boost::asio::ip::tcp::socket& socket,
                                        boost::system::error_code wait_ec, bool event_tells,
                                        ConnectDeadline& deadline);

// Whether `socket`'s wait can go straight to the reactor with the flag consulted (Boost 1.74's
// epoll reactor, a registered descriptor Asio already holds for non-blocking).
bool CanWaitQuietly(boost::asio::ip::tcp::socket& socket);
// Queues `op` as a read-readiness (or, `write`, write-readiness) operation that the reactor
// completes at once while the flag says an edge may have come, without changing the
// registration (which for `write` must hold EPOLLOUT already).
void StartQuietWait(boost::asio::ip::tcp::socket& socket, boost::asio::detail::reactor_op* op,
                    bool write = false);

// The operation Asio's async_wait allocates (its recycling allocator, its outstanding-work
// tracking), started as its reads are.
template <typename Handler>
void QuietWait(boost::asio::ip::tcp::socket& socket, bool write, Handler& handler) {
  using Op = boost::asio::detail::reactive_wait_op<Handler, boost::asio::any_io_executor>;
  typename Op::ptr p = {std::addressof(handler), Op::ptr::allocate(handler), nullptr};
  p.p = new (p.v) Op(boost::system::error_code(), handler, socket.get_executor());
  StartQuietWait(socket, p.p, write);
  p.v = p.p = nullptr;
}

// Has `socket` (a connect in progress, registered by BeginConnect) call `handler(error_code)`
// once it may be writable; where the waits can consult the flag, without a change to its
// registration (which holds EPOLLOUT already).
template <typename Handler>
void WaitConnected(boost::asio::ip::tcp::socket& socket, Handler handler) {
#if BOOST_VERSION == 107400
  if (CanWaitQuietly(socket)) return QuietWait(socket, /*write=*/true, handler);
#endif
  socket.async_wait(boost::asio::ip::tcp::socket::wait_write, std::move(handler));
}
}  // namespace internal

template <typename Handler>
void WaitReadable(boost::asio::ip::tcp::socket& socket, Handler handler) {
#if BOOST_VERSION == 107400
  if (internal::CanWaitQuietly(socket)) return internal::QuietWait(socket, false, handler);
#endif
  socket.async_wait(boost::asio::ip::tcp::socket::wait_read, std::move(handler));
}

template <typename Handler>
void StartConnect(boost::asio::ip::tcp::socket& socket, const boost::asio::ip::tcp::endpoint& to,
                  std::chrono::nanoseconds timeout, Handler done) {
  const internal::ConnectStart start = internal::BeginConnect(socket, to);
  if (start.done) return done(start.ec);
  auto deadline = std::make_unique<internal::ConnectDeadline>();
  deadline->Arm(socket, timeout);
  internal::WaitConnected(socket,
                          [&socket, deadline = std::move(deadline), event_tells = start.event_tells,
                           done = std::move(done)](boost::system::error_code ec) mutable {
                            done(internal::FinishConnect(socket, ec, event_tells, *deadline));
                          });
}

}  // namespace drover::net
