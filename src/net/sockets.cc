#include "net/sockets.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <typeinfo>

#include "common/host_port.h"
#include "drover/mutex.h"

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

std::string AddressText(const asio::ip::address& ip) {
  if (!ip.is_v4()) return ip.to_string();
  const asio::ip::address_v4::bytes_type bytes = ip.to_v4().to_bytes();
  char text[16];
  char* at = text;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i > 0) *at++ = '.';
    const unsigned b = bytes[i];
    if (b >= 100) *at++ = static_cast<char>('0' + b / 100);
    if (b >= 10) *at++ = static_cast<char>('0' + b / 10 % 10);
    *at++ = static_cast<char>('0' + b % 10);
  }
  return std::string(text, static_cast<std::size_t>(at - text));
}

std::string EndpointText(const asio::ip::tcp::endpoint& endpoint) {
  const std::string port = std::to_string(endpoint.port());
  if (endpoint.address().is_v6()) return "[" + endpoint.address().to_string() + "]:" + port;
  return AddressText(endpoint.address()) + ":" + port;
}

boost::system::error_code Listen(asio::ip::tcp::acceptor& acceptor,
                                 const asio::ip::tcp::endpoint& endpoint, int backlog,
                                 bool reuse_port) {
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec && reuse_port) {
    const int on = 1;
    if (::setsockopt(acceptor.native_handle(), SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) {
      ec.assign(errno, boost::system::system_category());
    }
  }
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
  static auto& Impl(tcp::socket& s) {  // (reactive_socket_service<tcp>'s, with the protocol)
    constexpr auto impl = &SocketState::impl_;
    return (s.*impl).get_implementation();
  }
  static asio::detail::socket_ops::state_type& Of(tcp::socket& s) { return Impl(s).state_; }
};

error_code Errno(int err) { return {err, boost::system::system_category()}; }

#if BOOST_VERSION == 107400 && defined(BOOST_ASIO_HAS_EPOLL)
#define DROVER_NET_QUIET_WAIT 1

// The reactor's record of a descriptor (see WaitReadable in sockets.h). Its members are private;
// an explicit instantiation may name them (access is not checked in its template arguments), and
// the pointers to members it is given are handed out by friend functions.
using Reactor = asio::detail::epoll_reactor;
using DescriptorState = Reactor::descriptor_state;

template <typename Tag, typename Tag::Type kMember>
struct Expose {
  friend typename Tag::Type MemberOf(Tag) { return kMember; }
};
struct MutexOf {
  using Type = asio::detail::conditionally_enabled_mutex DescriptorState::*;
  friend Type MemberOf(MutexOf);
};
struct ReactorOf {
  using Type = Reactor* DescriptorState::*;
  friend Type MemberOf(ReactorOf);
};
struct OpQueuesOf {
  using Type =
      asio::detail::op_queue<asio::detail::reactor_op> (DescriptorState::*)[Reactor::max_ops];
  friend Type MemberOf(OpQueuesOf);
};
struct MayBeReadyOf {
  using Type = bool (DescriptorState::*)[Reactor::max_ops];
  friend Type MemberOf(MayBeReadyOf);
};
struct EventsOf {
  using Type = std::uint32_t DescriptorState::*;
  friend Type MemberOf(EventsOf);
};
struct ReportedOf {  // the events of the reactor's last report of the descriptor
  using Type = unsigned int asio::detail::scheduler_operation::*;
  friend Type MemberOf(ReportedOf);
};
struct EpollOf {
  using Type = int Reactor::*;
  friend Type MemberOf(EpollOf);
};
struct DescriptorOf {
  using Type = int DescriptorState::*;
  friend Type MemberOf(DescriptorOf);
};
struct ShutDownOf {
  using Type = bool DescriptorState::*;
  friend Type MemberOf(ShutDownOf);
};
struct AllocateOf {
  using Type = DescriptorState* (Reactor::*)();
  friend Type MemberOf(AllocateOf);
};
struct FreeOf {
  using Type = void (Reactor::*)(DescriptorState*);
  friend Type MemberOf(FreeOf);
};
template struct Expose<EventsOf, &DescriptorState::registered_events_>;
template struct Expose<DescriptorOf, &DescriptorState::descriptor_>;
template struct Expose<ShutDownOf, &DescriptorState::shutdown_>;
template struct Expose<AllocateOf, &Reactor::allocate_descriptor_state>;
template struct Expose<FreeOf, &Reactor::free_descriptor_state>;
template struct Expose<ReportedOf, &asio::detail::scheduler_operation::task_result_>;
template struct Expose<EpollOf, &Reactor::epoll_fd_>;
template struct Expose<MutexOf, &DescriptorState::mutex_>;
template struct Expose<ReactorOf, &DescriptorState::reactor_>;
template struct Expose<OpQueuesOf, &DescriptorState::op_queue_>;
template struct Expose<MayBeReadyOf, &DescriptorState::try_speculative_>;

// The events of the reactor's last report of a descriptor.
unsigned int& ReportedEvents(DescriptorState& state) {
  // A private base: only a C-style cast may convert to it ([expr.cast]/4).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
  auto& op = (asio::detail::scheduler_operation&)(state);  // NOLINT(google-readability-casting)
#pragma GCC diagnostic pop
  return op.*MemberOf(ReportedOf{});
}

// The record may have served a closed descriptor before; nothing it reported is this one's.
void ForgetPeerEnd(DescriptorState& state) {
  ReportedEvents(state) &= ~static_cast<unsigned int>(EPOLLRDHUP);
}

// The reactor's record of `socket` when its waits can consult the flag: registered, and held for
// non-blocking (else Asio's own start would set O_NONBLOCK first).
DescriptorState* QuietState(tcp::socket& socket) {
  const auto& impl = SocketState::Impl(socket);
  if ((impl.state_ & asio::detail::socket_ops::non_blocking) == 0) return nullptr;
  return impl.reactor_data_;
}

// The reactor's record of a socket, under its lock for as long as this lives; false (nothing
// locked) when QuietState() has none.
class LockedRecord {
 public:
  explicit LockedRecord(tcp::socket& socket) : state_(QuietState(socket)) {
    if (state_) Mutex().lock();
  }
  ~LockedRecord() {
    if (state_) Mutex().unlock();
  }
  LockedRecord(const LockedRecord&) = delete;
  LockedRecord& operator=(const LockedRecord&) = delete;

  explicit operator bool() const { return state_ != nullptr; }
  // Whether an edge may have come since a read last found the socket empty.
  bool MayBeReadable() const { return ((*state_).*MemberOf(MayBeReadyOf{}))[Reactor::read_op]; }
  // The socket's receive queue was found empty, so no edge since needs a read; a pending read
  // operation keeps the flag as the reactor left it.
  void MarkDrained() {
    if (((*state_).*MemberOf(OpQueuesOf{}))[Reactor::read_op].empty()) {
      ((*state_).*MemberOf(MayBeReadyOf{}))[Reactor::read_op] = false;
    }
  }
  // Whether the peer's end was reported: EPOLLRDHUP is in the registration (WatchPeerEnd) and in
  // the reactor's last report of the descriptor. Once the FIN came every report carries it (it
  // is the socket's state, not an edge). On a one-thread context the reactor made that report
  // before this handler ran. On a context of several threads another thread may be making it now
  // (the reactor records a report without this lock): missed here, it is handled after, under
  // this lock, and that marks the socket readable again -- so no end goes unseen.
  bool PeerEndReported() { return (Reported() & EPOLLRDHUP) != 0; }  // (on a watched socket)
  bool WatchesPeerEnd() { return (Registered() & EPOLLRDHUP) != 0; }
  // Adds EPOLLRDHUP to the registration (one EPOLL_CTL_MOD, kept by the reactor's own later
  // modifications); false if epoll refused.
  bool WatchPeerEnd(int fd) {
    if ((Registered() & EPOLLRDHUP) != 0) return true;
    if (Registered() == 0) return false;  // not in the epoll set
    ForgetPeerEnd(*state_);
    epoll_event ev{};
    ev.events = Registered() | EPOLLRDHUP;
    ev.data.ptr = state_;
    const Reactor& reactor = *((*state_).*MemberOf(ReactorOf{}));
    if (::epoll_ctl(reactor.*MemberOf(EpollOf{}), EPOLL_CTL_MOD, fd, &ev) != 0) return false;
    Registered() = ev.events;
    // A modified registration is reported again for whatever is ready when the reactor next
    // asks: nothing there now needs a read to be found.
    MarkDrained();
    return true;
  }
  std::uint32_t Events() { return Registered(); }

 private:
  asio::detail::conditionally_enabled_mutex& Mutex() { return (*state_).*MemberOf(MutexOf{}); }
  std::uint32_t& Registered() { return (*state_).*MemberOf(EventsOf{}); }
  unsigned int& Reported() { return ReportedEvents(*state_); }

  DescriptorState* state_;
};

// socket.assign(protocol, fd)'s steps (Boost 1.74's do_assign and the reactor's
// register_descriptor) with `also` in the registration's events besides Asio's own, so that
// the one EPOLL_CTL_ADD asks for all of them. With EPOLLOUT in `also` the socket is a connect in
// progress, not writable: an edge must come before a write-readiness wait completes (an edge
// that came before the wait started sets the flag again, under the record's lock). On error
// `fd` is left open.
error_code Register(tcp::socket& socket, const tcp& protocol, int fd, std::uint32_t also) {
  auto& impl = SocketState::Impl(socket);
  if (impl.socket_ != asio::detail::invalid_socket) return asio::error::already_open;
  Reactor& reactor =
      asio::use_service<Reactor>(asio::query(socket.get_executor(), asio::execution::context));
  DescriptorState* state = (reactor.*MemberOf(AllocateOf{}))();
  {
    const asio::detail::conditionally_enabled_mutex::scoped_lock lock((*state).*
                                                                      MemberOf(MutexOf{}));
    (*state).*MemberOf(ReactorOf{}) = &reactor;
    (*state).*MemberOf(DescriptorOf{}) = fd;
    (*state).*MemberOf(ShutDownOf{}) = false;
    for (bool& may_be_ready : (*state).*MemberOf(MayBeReadyOf{})) may_be_ready = true;
    if ((also & EPOLLOUT) != 0) ((*state).*MemberOf(MayBeReadyOf{}))[Reactor::write_op] = false;
    ForgetPeerEnd(*state);
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLPRI | EPOLLET | also;  // Asio's, and `also`
  ev.data.ptr = state;
  (*state).*MemberOf(EventsOf{}) = ev.events;
  if (::epoll_ctl(reactor.*MemberOf(EpollOf{}), EPOLL_CTL_ADD, fd, &ev) != 0) {
    const int err = errno;
    (reactor.*MemberOf(FreeOf{}))(state);
    return Errno(err);
  }
  impl.reactor_data_ = state;
  impl.socket_ = fd;
  impl.state_ = asio::detail::socket_ops::stream_oriented;
  impl.protocol_ = protocol;
  return {};
}
#else
struct DescriptorState;
DescriptorState* QuietState(tcp::socket&) { return nullptr; }

// Other Boost versions and reactors: no record to consult.
class LockedRecord {
 public:
  explicit LockedRecord(tcp::socket&) {}
  explicit operator bool() const { return false; }
  bool MayBeReadable() const { return true; }
  void MarkDrained() {}
  bool PeerEndReported() { return false; }
  bool WatchesPeerEnd() { return false; }
  bool WatchPeerEnd(int) { return false; }
  std::uint32_t Events() { return 0; }
};

error_code Register(tcp::socket& socket, const tcp& protocol, int fd, std::uint32_t) {
  error_code ec;
  socket.assign(protocol, fd, ec);
  return ec;
}
#endif

// Whether this thread runs `socket`'s io_context and is the one thread that may (concurrency
// hint 1): then nothing the reactor does for the socket happens before this handler returns.
// The socket's executor is the context's own or a strand of it. (Boost 1.74's any_executor
// target<T>() casts without checking the type, so the type is compared first.)
bool OnlyThread(tcp::socket& socket) {
  using IoExecutor = asio::io_context::executor_type;
  using Strand = asio::strand<IoExecutor>;
  const asio::any_io_executor& any = socket.get_executor();
  std::optional<IoExecutor> executor;
  if (any.target_type() == typeid(IoExecutor)) {
    executor = *any.target<IoExecutor>();
  } else if (any.target_type() == typeid(Strand)) {
    executor = any.target<Strand>()->get_inner_executor();
  }
  if (!executor || !executor->running_in_this_thread()) return false;
  return asio::use_service<asio::detail::scheduler>(executor->context()).concurrency_hint() == 1;
}

// Whether `socket`'s reads run here one at a time, as WatchPeerEnd() requires of its caller: on
// the only thread of its context, or in a handler of the strand that is its executor.
bool ReadsSerialHere(tcp::socket& socket) {
  if (OnlyThread(socket)) return true;
  using Strand = asio::strand<asio::io_context::executor_type>;
  const asio::any_io_executor& any = socket.get_executor();
  return any.target_type() == typeid(Strand) && any.target<Strand>()->running_in_this_thread();
}

}  // namespace

std::size_t ReadSome(tcp::socket& socket, asio::mutable_buffer buffer, error_code& ec,
                     bool* end_follows) {
  ec = {};
  if (end_follows) *end_follows = false;
  if (buffer.size() == 0) return 0;
  LockedRecord record(socket);  // the read and what it says about the socket, as one step
  ssize_t n = 0;
  do {
    n = ::recv(socket.native_handle(), buffer.data(), buffer.size(), MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  const int err = n < 0 ? errno : 0;
  if (record && n < 0 && err == EAGAIN) {
    record.MarkDrained();
  } else if (record && 0 < n && static_cast<std::size_t>(n) < buffer.size() &&
             record.WatchesPeerEnd()) {
    // Fewer bytes than asked: all there were -- and maybe the peer's end too, which a read that
    // returns bytes takes without saying so (the next one answers eof). No edge will come for
    // an end already taken, so the socket counts as drained only when the end is known to be
    // yet to come: not in the reactor's last report, so its arrival, if any, raises an edge.
    if (record.PeerEndReported()) {
      if (end_follows) *end_follows = true;
    } else {
      record.MarkDrained();
    }
  }
  if (n < 0) {
    ec = Errno(err);  // EAGAIN is would_block
    return 0;
  }
  if (n == 0) ec = asio::error::eof;
  return static_cast<std::size_t>(n);
}

std::size_t WriteSome(tcp::socket& socket, std::span<const asio::const_buffer> pieces,
                      error_code& ec, int flags) {
  ec = {};
  const int fd = socket.native_handle();
  const int all_flags = MSG_DONTWAIT | MSG_NOSIGNAL | flags;
  std::size_t total = 0;
  for (const asio::const_buffer& b : pieces) total += b.size();
  if (total == 0) return 0;
  ssize_t n = 0;
  if (pieces.size() == 1 || total <= kCoalescedWrite) {
    char joined[kCoalescedWrite];
    const void* data = pieces[0].data();
    if (pieces.size() > 1) {
      std::size_t at = 0;
      for (const asio::const_buffer& b : pieces) {
        if (b.size() == 0) continue;  // (an empty buffer's data may be null)
        std::memcpy(joined + at, b.data(), b.size());
        at += b.size();
      }
      data = joined;
    }
    do {
      n = ::send(fd, data, total, all_flags);
    } while (n < 0 && errno == EINTR);
  } else {
    std::array<iovec, 64> iov;
    std::size_t count = 0;
    for (const asio::const_buffer& b : pieces) {
      if (count == iov.size()) break;  // the rest with the next call
      if (b.size() == 0) continue;
      iov[count++] = {const_cast<void*>(b.data()), b.size()};
    }
    msghdr message{};
    message.msg_iov = iov.data();
    message.msg_iovlen = count;
    do {
      n = ::sendmsg(fd, &message, all_flags);
    } while (n < 0 && errno == EINTR);
  }
  if (n < 0) {
    ec = Errno(errno);  // EAGAIN is would_block
    return 0;
  }
  return static_cast<std::size_t>(n);
}

bool WatchPeerEnd(tcp::socket& socket) {
  if (!ReadsSerialHere(socket)) return false;  // two reads at once could take an end unseen
  LockedRecord record(socket);
  return record && record.WatchPeerEnd(socket.native_handle());
}

bool KnownDrained(tcp::socket& socket) {
  const LockedRecord record(socket);
  return record && !record.MayBeReadable();
}

std::uint32_t RegisteredEvents(tcp::socket& socket) {
  LockedRecord record(socket);
  return record ? record.Events() : 0;
}

namespace internal {

bool CanWaitQuietly(tcp::socket& socket) { return QuietState(socket) != nullptr; }

void StartQuietWait(tcp::socket& socket, asio::detail::reactor_op* op, bool write) {
#ifdef DROVER_NET_QUIET_WAIT
  auto& impl = SocketState::Impl(socket);
  Reactor& reactor = *((*impl.reactor_data_).*MemberOf(ReactorOf{}));
  // Speculation allowed: with the flag set the wait completes at once (a wait operation has
  // nothing to try), with it clear it is queued without touching the registration (a write
  // wait's change adds EPOLLOUT only where the registration lacks it).
  reactor.start_op(write ? Reactor::write_op : Reactor::read_op, impl.socket_, impl.reactor_data_,
                   op, /*is_continuation=*/false, /*allow_speculative=*/true);
#else
  (void)socket;
  (void)op;
  (void)write;
#endif
}

}  // namespace internal

error_code Adopt(tcp::socket& socket, const tcp& protocol, int fd, Registration also) {
  error_code ec;
  const std::uint32_t more = (also.peer_end ? EPOLLRDHUP : 0U) | (also.connecting ? EPOLLOUT : 0U);
  if (more == 0) {
    socket.assign(protocol, fd, ec);
  } else {
    ec = Register(socket, protocol, fd, more);
  }
  if (ec) {
    ::close(fd);
    return ec;
  }
  auto& state = SocketState::Of(socket);
  state |= asio::detail::socket_ops::internal_non_blocking;
  state &= ~asio::detail::socket_ops::possible_dup;
  // Registering the descriptor (EPOLL_CTL_ADD) queued an event if bytes are there already, and
  // every later arrival raises an edge: the reactor needs no read to learn either -- provided it
  // has not taken in that event yet, which holds when the only thread that runs the socket's
  // context is this one, between two of its handlers.
  if (QuietState(socket) != nullptr && OnlyThread(socket)) LockedRecord(socket).MarkDrained();
  return ec;
}

void MarkNonBlocking(tcp::socket& socket) {
  SocketState::Of(socket) |= asio::detail::socket_ops::user_set_non_blocking;
}

namespace internal {

ConnectStart BeginConnect(tcp::socket& socket, const tcp::endpoint& to) {
  const int fd =
      ::socket(to.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) return {Errno(errno), true, false};
  const int rc = ::connect(fd, to.data(), static_cast<socklen_t>(to.size()));
  const int err = rc == 0 ? 0 : errno;
  if (rc != 0 && err != EINPROGRESS) {
    ::close(fd);
    return {Errno(err), true, false};
  }
  // A connect in progress is registered for writability, which ends its wait, and on the
  // context's one thread (as WatchPeerEnd() itself) for the peer's end, in the one
  // EPOLL_CTL_ADD: the wait changes nothing, and WatchPeerEnd() costs nothing after.
  const bool in_progress = rc != 0;
  const bool only_thread = OnlyThread(socket);
  if (error_code ec =
          Adopt(socket, to.protocol(), fd, {.peer_end = only_thread, .connecting = in_progress})) {
    return {ec, true, false};
  }
  if (!in_progress) return {{}, true, false};  // at once (loopback may)
  // When the reactor holds the new socket for drained, the event that ends the connect tells
  // success from failure: a failure carries EPOLLERR/EPOLLHUP, which marks the socket readable,
  // and a success without a greeting does not -- then SO_ERROR need not be asked.
  const bool event_tells = KnownDrained(socket);
  return {{}, false, event_tells};
}

// The connect deadlines of one execution context and the one timer that watches them. A connect
// that ends leaves the list without touching the timer, and a deadline later than the timer's
// expiry does not re-arm it: the timer fires at the earliest deadline it was armed for, ends
// the attempts that are due and re-arms for the earliest left -- under a steady stream of
// connects about once per connect timeout (KeepConnectTimerArmed), where a timer per connect
// reprogrammed the timerfd on nearly every connect. The list is unordered (a connect's life is
// short; the scan runs when the timer fires). Deadlines are armed on it only by the only thread
// of a one-thread context (ConnectDeadline::Arm), which also runs the timer; the lock covers the
// context's shutdown, which may run on another thread.
class ConnectWatch : public asio::execution_context::service {
 public:
  static asio::execution_context::id id;
  explicit ConnectWatch(asio::execution_context& context) : service(context) {}

  void Add(ConnectDeadline& d, const asio::any_io_executor& executor) DROVER_EXCLUDES(mu_) {
    const MutexLock lock(mu_);
    if (shut_down_) return;  // (the context is going: nothing will run its timers)
    d.watch = this;
    d.prev = nullptr;
    d.next = head_;
    if (head_ != nullptr) head_->prev = &d;
    head_ = &d;
    if (!timer_) timer_.emplace(executor);
    if (!armed_ || d.at < *armed_) Arm(d.at);
  }

  void Remove(ConnectDeadline& d) DROVER_EXCLUDES(mu_) {
    const MutexLock lock(mu_);
    Unlink(d);
    if (head_ == nullptr && armed_ && !keep_armed_ && !shut_down_) {
      armed_.reset();
      timer_->cancel();  // the context's run() ends when its other work does
    }
  }

  void KeepArmed() DROVER_EXCLUDES(mu_) {
    const MutexLock lock(mu_);
    keep_armed_ = true;
  }

 private:
  void shutdown() override DROVER_EXCLUDES(mu_) {
    const MutexLock lock(mu_);
    shut_down_ = true;
    while (head_ != nullptr) Unlink(*head_);  // their owners go with the context's operations
    armed_.reset();
    timer_.reset();
  }

  void Unlink(ConnectDeadline& d) DROVER_REQUIRES(mu_) {
    if (d.watch != this) return;
    if (d.prev != nullptr) d.prev->next = d.next;
    if (d.next != nullptr) d.next->prev = d.prev;
    if (head_ == &d) head_ = d.next;
    d.watch = nullptr;
    d.prev = d.next = nullptr;
  }

  void Arm(std::chrono::steady_clock::time_point at) DROVER_REQUIRES(mu_) {
    armed_ = at;
    timer_->expires_at(at);  // (a wait it replaces ends with operation_aborted and is ignored)
    timer_->async_wait([this](error_code ec) {
      if (ec != asio::error::operation_aborted) Fire();
    });
  }

  void Fire() DROVER_EXCLUDES(mu_) {
    const MutexLock lock(mu_);
    if (shut_down_) return;
    armed_.reset();
    const auto now = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> earliest;
    for (ConnectDeadline* d = head_; d != nullptr;) {
      ConnectDeadline* next = d->next;
      if (d->at <= now) {
        Unlink(*d);
        d->timed_out = true;
        error_code ignored;
        d->waiting->cancel(ignored);  // its wait ends with operation_aborted
      } else if (!earliest || d->at < *earliest) {
        earliest = d->at;
      }
      d = next;
    }
    if (earliest) Arm(*earliest);
  }

  Mutex mu_;
  ConnectDeadline* head_ DROVER_GUARDED_BY(mu_) = nullptr;
  std::optional<asio::steady_timer> timer_ DROVER_GUARDED_BY(mu_);
  std::optional<std::chrono::steady_clock::time_point> armed_ DROVER_GUARDED_BY(mu_);
  bool shut_down_ DROVER_GUARDED_BY(mu_) = false;
  bool keep_armed_ DROVER_GUARDED_BY(mu_) = false;
};

asio::execution_context::id ConnectWatch::id;

struct ConnectDeadline::OwnTimer {
  explicit OwnTimer(const asio::any_io_executor& executor) : timer(executor) {}
  asio::steady_timer timer;
  bool pending = true;
  bool timed_out = false;
};

ConnectDeadline::~ConnectDeadline() {
  if (owner != nullptr) owner->Remove(*this);
  if (own) own->pending = false;  // its timer's handler must not touch the socket any more
}

}  // namespace internal

void KeepConnectTimerArmed(asio::execution_context& context) {
  asio::use_service<internal::ConnectWatch>(context).KeepArmed();
}

namespace internal {

void ConnectDeadline::Arm(tcp::socket& socket, std::chrono::nanoseconds timeout) {
  if (timeout <= std::chrono::nanoseconds::zero()) return;
  waiting = &socket;
  const asio::any_io_executor executor = socket.get_executor();
  if (!OnlyThread(socket)) {
    own = std::make_shared<OwnTimer>(executor);
    own->timer.expires_after(timeout);
    // The handler can run after the wait ended (queued as it ends): it touches the socket only
    // while the wait is pending.
    own->timer.async_wait([&socket, t = own](error_code ec) {
      if (ec || !t->pending) return;
      t->timed_out = true;
      socket.cancel(ec);  // the wait ends with operation_aborted
    });
    return;
  }
  at = std::chrono::steady_clock::now() +
       std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  owner = &asio::use_service<ConnectWatch>(asio::query(executor, asio::execution::context));
  owner->Add(*this, executor);
}

void ConnectDeadline::Disarm() {
  // (The watch outlives every deadline of its context: a context shuts its services down, this
  // one first, before it destroys any of them, and its pending operations, which own their
  // deadlines, go in the shutdown.)
  if (owner != nullptr) owner->Remove(*this);
  if (own) {
    own->pending = false;
    own->timer.cancel();
    timed_out = own->timed_out;
  }
}

error_code FinishConnect(tcp::socket& socket, error_code ec, bool event_tells,
                         ConnectDeadline& deadline) {
  deadline.Disarm();
  if (!ec && !socket.is_open()) {
    ec = asio::error::operation_aborted;  // closed meanwhile
  } else if (!ec && !(event_tells && KnownDrained(socket))) {
    int so_error = 0;
    socklen_t size = sizeof so_error;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &so_error, &size) != 0) {
      so_error = errno;
    }
    ec = so_error != 0 ? Errno(so_error) : error_code{};
  }
  if (deadline.timed_out) ec = asio::error::timed_out;
  if (ec) {
    error_code ignored;
    socket.close(ignored);
  }
  return ec;
}

}  // namespace internal

asio::awaitable<error_code> Connect(tcp::socket& socket, const tcp::endpoint& to,
                                    std::chrono::nanoseconds timeout) {
  const internal::ConnectStart start = internal::BeginConnect(socket, to);
  if (start.done) co_return start.ec;
  internal::ConnectDeadline deadline;
  deadline.Arm(socket, timeout);
  error_code ec;
  auto token = asio::redirect_error(asio::use_awaitable, ec);
  co_await asio::async_initiate<decltype(token), void(error_code)>(
      [&socket](auto handler) { internal::WaitConnected(socket, std::move(handler)); }, token);
  co_return internal::FinishConnect(socket, ec, start.event_tells, deadline);
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
