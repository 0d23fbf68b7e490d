#include "net/http_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <charconv>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/http_error.h"
#include "common/thread_name.h"
#include "drover/mutex.h"
#include "net/send_ring.h"
#include "net/sockets.h"
#include "net/tls_context.h"

namespace drover::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

namespace {

constexpr std::chrono::seconds kTlsHandshakeTimeout{10};

// The end of a connection rather than a request the client got wrong.
bool ClientLeft(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == beast::error::timeout ||
         ec == asio::error::operation_aborted || ec == asio::error::connection_reset;
}

// A 503 the listener writes to a client over the connection limit, before any request is read.
std::string BusyReply(const std::string& name) {
  const std::string body =
      ErrorBody(ResourceExhaustedError("too many connections to this " + name + "; retry shortly"));
  return "HTTP/1.1 503 Service Unavailable\r\nServer: drover-" + name +
         "\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

using Pieces = std::vector<std::shared_ptr<const std::string>>;

// The last chunk of a chunked response.
constexpr std::string_view kLastChunk = "0\r\n\r\n";

// One chunk of `pieces` (all of them: its size line, the pieces and its CRLF) as buffers over
// `pieces` and `size_line`, without a copy -- unless there are more pieces than a gather write
// takes at once, when they are joined into `joined` first; or, for `last`, the last chunk.
class ChunkBuffers {
 public:
  static constexpr std::size_t kMaxGather = 16;

  ChunkBuffers(const Pieces& pieces, std::string& joined, bool last) {
    if (last) {
      buffers_[count_++] = asio::buffer(kLastChunk);
      return;
    }
    std::size_t size = 0;
    for (const auto& p : pieces) size += p->size();
    // (Once per stream and chunk: a thousand watchers of one event format it a thousand times.)
    char* end = std::to_chars(size_line_, size_line_ + sizeof size_line_ - 2, size, 16).ptr;
    *end++ = '\r';
    *end++ = '\n';
    buffers_[count_++] = asio::buffer(size_line_, static_cast<std::size_t>(end - size_line_));
    if (pieces.size() <= kMaxGather) {
      for (const auto& p : pieces) buffers_[count_++] = asio::buffer(*p);
    } else {
      joined.clear();
      joined.reserve(size);
      for (const auto& p : pieces) joined += *p;
      buffers_[count_++] = asio::buffer(joined);
    }
    buffers_[count_++] = asio::buffer("\r\n", 2);
  }
  ChunkBuffers(const ChunkBuffers&) = delete;
  ChunkBuffers& operator=(const ChunkBuffers&) = delete;

  std::span<const asio::const_buffer> buffers() const { return {buffers_.data(), count_}; }
  // The bytes from `offset` on, copied (a write that must wait keeps them).
  std::string Rest(std::size_t offset) const {
    std::string rest;
    for (const asio::const_buffer& b : buffers()) {
      if (offset >= b.size()) {
        offset -= b.size();
        continue;
      }
      rest.append(static_cast<const char*>(b.data()) + offset, b.size() - offset);
      offset = 0;
    }
    return rest;
  }

 private:
  char size_line_[20];  // hex digits of a size_t, then CRLF
  std::array<asio::const_buffer, kMaxGather + 2> buffers_;
  std::size_t count_ = 0;
};

// Feeds `parser` what `buffer` holds already: a request without a body is done with its head, and
// a body usually comes with the head, so most requests need no read after the head's -- and no
// trip through the scheduler, which an operation that completes at once still takes. `ec` is
// set only for an error (a malformed body, one over the limit).
void ParseBuffered(http::request_parser<http::string_body>& parser, beast::flat_buffer& buffer,
                   error_code& ec) {
  while (!parser.is_done() && buffer.size() > 0) {
    const std::size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more) {
      ec = {};
      return;
    }
    if (ec || used == 0) return;
  }
}

// Writes what `socket` takes of `serializer` now, without waiting (WriteSome): an answer that fits
// -- nearly every one -- goes out by one send, without an asynchronous operation and its trip
// through the scheduler. `ec` is set only for an error; what the socket had no room for is left
// in the serializer (`!is_done()`) for an asynchronous write.
void WriteNow(tcp::socket& socket, http::response_serializer<http::string_body>& serializer,
              error_code& ec) {
  while (!serializer.is_done()) {
    std::size_t sent = 0;
    serializer.next(ec, [&](error_code& step, const auto& buffers) {
      std::array<asio::const_buffer, 32> pieces;
      std::size_t count = 0;
      for (const asio::const_buffer b : beast::buffers_range_ref(buffers)) {
        if (count == pieces.size()) break;  // the rest with the next send
        pieces[count++] = b;
      }
      sent = WriteSome(socket, {pieces.data(), count}, step);
    });
    if (ec == asio::error::would_block) {
      ec = {};
      return;
    }
    if (ec) return;
    serializer.consume(sent);
  }
}

// Calls the source's Stop() once, when the stream is over however it ends -- also when the
// server goes away with the stream still open.
class SourceGuard {
 public:
  explicit SourceGuard(std::shared_ptr<StreamSource> source) : source_(std::move(source)) {}
  ~SourceGuard() { Stop(); }
  SourceGuard(const SourceGuard&) = delete;
  SourceGuard& operator=(const SourceGuard&) = delete;
  StreamSource* operator->() const { return source_.get(); }
  void Stop() {
    if (source_) std::exchange(source_, nullptr)->Stop();
  }
  // Handed on to what runs the stream from here (which stops it in turn).
  std::shared_ptr<StreamSource> Release() { return std::exchange(source_, nullptr); }

 private:
  std::shared_ptr<StreamSource> source_;
};

// A stream whose chunk went into a SendBurst: told how its send went, on its strand.
class BurstSender {
 public:
  virtual asio::any_io_executor strand() = 0;
  // `rest`: what the socket had no room for (it must wait for the client); `failed`: the send
  // failed and the stream is over; `last`: that chunk was the stream's last.
  virtual void AfterBurst(std::string rest, bool failed, bool last) = 0;

 protected:
  ~BurstSender() = default;
};

// The chunks of the streams that one drain wakes on this thread, gathered as each stream takes
// its turn and sent together through the thread's SendRing -- one system call for a burst where
// each stream's own `send` would cost one each (on this project's 2-core machine a system call's
// entry and exit alone is about 1 us; a burst is an event going to a thousand watchers). While a
// chunk waits here its stream counts as writing and takes nothing more; after the send the
// stream is told on its strand and goes on from there (the rest of a partial send waits for the
// client, as a direct send's would). Open only where the thread has a ring; nested opens are
// no-ops (the outermost sends). Sent only from outside every strand: by SendIfFull() between two
// streams' turns, and at the end.
class SendBurst {
 public:
  SendBurst() {
    if (current_ != nullptr) return;
    ring_ = SendRing::ForThisThread();
    if (ring_ != nullptr) current_ = this;
  }
  ~SendBurst() {
    if (current_ != this) return;
    current_ = nullptr;
    // (Unwinding from a stream's step that threw: what is gathered goes with this thread's next
    // burst.)
    if (std::uncaught_exceptions() == 0) Send();
  }
  SendBurst(const SendBurst&) = delete;
  SendBurst& operator=(const SendBurst&) = delete;

  // The burst open on this thread, or null (a stream then sends at once).
  static SendBurst* Current() { return current_; }

  // A send is gathered in two steps, on the sender's strand, which the caller leaves at once (the
  // burst is sent after): its bytes, copied by one or more Append()s, then Add(), which makes them
  // one send to `fd`; `sender` is told how it went.
  void Append(std::span<const asio::const_buffer> pieces) {
    std::vector<char>& bytes = batches_[filling_].bytes;
    for (const asio::const_buffer& piece : pieces) {
      const char* data = static_cast<const char*>(piece.data());
      bytes.insert(bytes.end(), data, data + piece.size());
    }
  }
  void Add(std::shared_ptr<BurstSender> sender, int fd, bool last) {
    Batch& b = batches_[filling_];
    const std::size_t offset = Gathered(b);
    b.entries.push_back({std::move(sender), fd, offset, b.bytes.size() - offset, last});
  }
  // Drops what was appended since the last Add().
  void Discard() {
    Batch& b = batches_[filling_];
    b.bytes.resize(Gathered(b));
  }

  // Sends what was gathered once it is a part's worth: the first clients hear of the event while
  // the rest take their turn.
  void SendIfFull() {
    if (current_ == this && batches_[filling_].entries.size() >= kPart) Send();
  }

 private:
  static constexpr std::size_t kPart = 32;

  struct Entry {
    std::shared_ptr<BurstSender> sender;
    int fd;
    std::size_t offset;
    std::size_t size;
    bool last;
  };
  struct Batch {
    std::vector<char> bytes;
    std::vector<Entry> entries;
    std::vector<SendRing::Send> sends;
  };
  // Where the bytes of the entries added end.
  static std::size_t Gathered(const Batch& b) {
    return b.entries.empty() ? 0 : b.entries.back().offset + b.entries.back().size;
  }

  // Sends what was added. A stream told how its send went may at once take its next chunk and add
  // it here: that goes into the other batch, sent by this loop's next round.
  void Send() {
    while (!batches_[filling_].entries.empty()) {
      Batch& b = batches_[filling_];
      filling_ ^= 1;
      b.sends.clear();
      for (const Entry& e : b.entries) b.sends.push_back({e.fd, b.bytes.data() + e.offset, e.size});
      ring_->SendAll(b.sends);
      for (std::size_t i = 0; i < b.entries.size(); ++i) {
        Entry& e = b.entries[i];
        const long result = b.sends[i].result;
        const bool failed = result < 0 && result != -EAGAIN && result != -EWOULDBLOCK;
        std::string rest;
        if (!failed) {
          const std::size_t sent = result < 0 ? 0 : static_cast<std::size_t>(result);
          if (sent < e.size) rest.assign(b.bytes.data() + e.offset + sent, e.size - sent);
        }
        BurstSender* sender = e.sender.get();
        asio::dispatch(sender->strand(), [sender = std::move(e.sender), rest = std::move(rest),
                                          failed, last = e.last]() mutable {
          sender->AfterBurst(std::move(rest), failed, last);
        });
      }
      b.entries.clear();
      b.bytes.clear();
      if (b.bytes.capacity() > kKeptBytes) std::vector<char>().swap(b.bytes);
    }
  }

  // A burst's bytes kept for the next one; more (a burst of large events) is given back.
  static constexpr std::size_t kKeptBytes = 1 << 20;

  static thread_local SendBurst* current_;
  // Two, kept per thread with their capacity: one being sent, one filling.
  static thread_local std::array<Batch, 2> batches_;
  static thread_local int filling_;
  SendRing* ring_ = nullptr;
};

thread_local SendBurst* SendBurst::current_ = nullptr;
thread_local std::array<SendBurst::Batch, 2> SendBurst::batches_;
thread_local int SendBurst::filling_ = 0;

}  // namespace

// The streams notified and not yet woken, as a lock-free list (the producer that notifies a
// thousand streams per event never waits for an io thread): the stream that finds the list empty
// posts a drain. The drain takes the whole list, hands a share of it to each other io thread, and
// wakes each stream by dispatching to its strand, which an io thread enters at once when the
// stream is waiting (it usually is): no post per stream.
//
// It also holds every open stream of its server (an intrusive list: no allocation), which is
// what keeps an idle one alive: no operation is pending for it and no coroutine holds it. A
// stream leaves when it ends; once the io threads are gone Release() abandons the rest, which
// frees each parked stream (its socket, its source) and hands each TLS stream's coroutine
// unwinding to the io_context, whose destruction then frees it.
class StreamWakeup::Queue {
 public:
  Queue(asio::io_context& io, int lanes) : io_(io), lanes_(std::max(1, lanes)) {}
  ~Queue() { Clear(); }

  void Add(std::shared_ptr<StreamWakeup> stream) {
    if (stopped_.load()) return;
    StreamWakeup* node = stream.get();
    node->self_ = std::move(stream);  // the list's reference, until a drain takes it
    StreamWakeup* head = head_.load();
    do {
      node->next_ = head;
    } while (!head_.compare_exchange_weak(head, node));
    if (head == nullptr) {  // the first of a burst: a drain is due
      MutexLock lock(mu_);
      if (!stopped_.load()) {
        asio::post(io_, [this] { Drain(); });
        return;
      }
    }
    if (stopped_.load()) Clear();  // raced with Stop(): nothing may stay listed
  }

  // Nothing is posted once this returns (the io_context is about to stop).
  void Stop() {
    {
      MutexLock lock(mu_);
      stopped_.store(true);
    }
    Clear();
  }

  // A stream opens: held here until it ends (Untrack) or the server stops (Release).
  void Track(std::shared_ptr<StreamWakeup> stream) {
    MutexLock lock(mu_);
    StreamWakeup* s = stream.get();
    s->kept_ = std::move(stream);
    s->open_prev_ = nullptr;
    s->open_next_ = open_;
    if (open_ != nullptr) open_->open_prev_ = s;
    open_ = s;
  }
  // A stream ended: let go of it (the caller holds a reference of its own). Once Release() took
  // it, nothing to do.
  void Untrack(StreamWakeup* s) {
    std::shared_ptr<StreamWakeup> kept;
    MutexLock lock(mu_);
    if (!s->kept_) return;
    Unlink(s);
    kept = std::move(s->kept_);
    // (`kept` goes after the lock: the caller's reference keeps the stream alive anyway.)
  }

  // After the io threads have stopped (nothing runs on a strand any more): abandons every stream
  // still open.
  void Release() {
    std::vector<std::shared_ptr<StreamWakeup>> open;
    {
      MutexLock lock(mu_);
      while (open_ != nullptr) {
        StreamWakeup* s = open_;
        Unlink(s);
        open.push_back(std::move(s->kept_));
      }
    }
    // Outside the lock: a stream that goes may drop the last reference to others' wake-ups.
    for (const std::shared_ptr<StreamWakeup>& s : open) s->Abandon();
  }

 private:
  // A share smaller than this is not worth another thread's wake-up.
  static constexpr std::size_t kShare = 64;

  void Unlink(StreamWakeup* s) DROVER_REQUIRES(mu_) {
    if (s->open_prev_ != nullptr) {
      s->open_prev_->open_next_ = s->open_next_;
    } else {
      open_ = s->open_next_;
    }
    if (s->open_next_ != nullptr) s->open_next_->open_prev_ = s->open_prev_;
    s->open_prev_ = s->open_next_ = nullptr;
  }

  std::vector<std::shared_ptr<StreamWakeup>> Take() {
    std::vector<std::shared_ptr<StreamWakeup>> streams;
    for (StreamWakeup* node = head_.exchange(nullptr); node != nullptr;) {
      StreamWakeup* next = node->next_;
      streams.push_back(std::move(node->self_));
      node = next;
    }
    std::reverse(streams.begin(), streams.end());  // in the order they were notified
    return streams;
  }

  void Clear() { (void)Take(); }

  void Drain() {
    std::vector<std::shared_ptr<StreamWakeup>> streams = Take();
    const std::size_t lanes = std::min<std::size_t>(
        static_cast<std::size_t>(lanes_), std::max<std::size_t>(1, streams.size() / kShare));
    const std::size_t share = (streams.size() + lanes - 1) / std::max<std::size_t>(1, lanes);
    for (std::size_t from = share; from < streams.size(); from += share) {
      const auto first = streams.begin() + static_cast<std::ptrdiff_t>(from);
      const auto last =
          streams.begin() + static_cast<std::ptrdiff_t>(std::min(streams.size(), from + share));
      asio::post(io_, [part = std::vector<std::shared_ptr<StreamWakeup>>(
                           std::make_move_iterator(first),
                           std::make_move_iterator(last))]() mutable { Wake(part); });
    }
    streams.resize(std::min(streams.size(), share));
    Wake(streams);
  }

  static void Wake(std::vector<std::shared_ptr<StreamWakeup>>& streams) {
    SendBurst burst;  // what the streams send, sent together as they take their turns
    for (std::shared_ptr<StreamWakeup>& stream : streams) {
      const asio::any_io_executor strand = stream->strand();
      asio::dispatch(strand, [stream = std::move(stream)] {
        // Cleared before the step runs: whatever is produced after it looks gets a new wake-up.
        stream->listed_.store(false, std::memory_order_release);
        stream->Woken();
      });
      burst.SendIfFull();
    }
  }

  asio::io_context& io_;
  const int lanes_;
  // Sequentially consistent, with stopped_: an Add that races with Stop() sees that it stopped,
  // or Stop()'s Clear() sees what it added.
  std::atomic<StreamWakeup*> head_{nullptr};
  std::atomic<bool> stopped_{false};
  Mutex mu_;  // a drain is posted only under it, while not stopped; guards the open list
  StreamWakeup* open_ DROVER_GUARDED_BY(mu_) = nullptr;
};

StreamWakeup::StreamWakeup(std::shared_ptr<Queue> queue) : queue_(std::move(queue)) {}

void StreamWakeup::Notify() {
  if (listed_.exchange(true, std::memory_order_acq_rel)) return;  // a wake-up is on its way
  queue_->Add(shared_from_this());
}

namespace {

// A stream over plain TCP once its head is written: no coroutine and no pending operation, only
// its socket, the source and this object, which the server's list of open streams holds (and,
// while a write waits, that write's handler). Each wake-up takes what the source has and sends it
// at once with a non-blocking write; only a client too slow to take a chunk makes a write wait
// (with the source's timeout).
class ParkedStream final : public StreamWakeup, public BurstSender {
 public:
  ParkedStream(tcp::socket socket, Connection connection, std::shared_ptr<StreamSource> source,
               std::shared_ptr<Queue> queue)
      : StreamWakeup(std::move(queue)),
        socket_(std::move(socket)),
        connection_(std::move(connection)),
        source_(std::move(source)) {}

  // On the stream's strand.
  static void Start(const std::shared_ptr<ParkedStream>& stream) {
    stream->queue().Track(stream);
    stream->source_->Start(stream);
    stream->Step();
  }

 private:
  std::shared_ptr<ParkedStream> self() {
    return std::static_pointer_cast<ParkedStream>(shared_from_this());
  }

  asio::any_io_executor strand() override { return socket_.get_executor(); }
  void Woken() override { Step(); }
  void Abandon() override { End(); }

  void Step() {
    if (ended_) return;
    if (writing_) return;  // taken once the write in flight is done
    while (true) {
      Pieces pieces;
      const StreamSource::Step step = source_->Take(pieces);
      if (step == StreamSource::Step::kWait) return;
      const bool last = step == StreamSource::Step::kEnd;
      std::string joined;
      const ChunkBuffers chunk(pieces, joined, last);
      if (SendBurst* burst = SendBurst::Current()) {
        writing_ = true;  // until AfterBurst()
        burst->Append(chunk.buffers());
        burst->Add(self(), socket_.native_handle(), last);
        return;
      }
      error_code ec;
      const std::size_t total = asio::buffer_size(chunk.buffers());
      const std::size_t sent = WriteSome(socket_, chunk.buffers(), ec);
      if (!ec && sent == total) {
        if (last) return End();
        continue;
      }
      if (ec && ec != asio::error::would_block) return End();
      // The client is slow to read: the rest within the timeout, nothing more taken meanwhile.
      return Wait(chunk.Rest(sent), last);
    }
  }

  void AfterBurst(std::string rest, bool failed, bool last) override {
    writing_ = false;
    if (ended_) return;
    if (failed) return End();
    if (!rest.empty()) return Wait(std::move(rest), last);
    if (last) return End();
    Step();  // what came meanwhile
  }

  void Wait(std::string rest, bool last) {
    writing_ = true;
    if (!timer_) timer_ = std::make_unique<asio::steady_timer>(socket_.get_executor());
    timer_->expires_after(source_->write_timeout());
    timer_->async_wait([self = self()](error_code ec) {
      if (!ec) self->socket_.close(ec);  // cut off: the write fails
    });
    auto owned = std::make_unique<std::string>(std::move(rest));
    const asio::const_buffer bytes = asio::buffer(*owned);
    asio::async_write(socket_, bytes,
                      [self = self(), owned = std::move(owned), last](error_code ec, std::size_t) {
                        self->writing_ = false;
                        self->timer_->cancel();
                        if (ec || last) return self->End();
                        self->Step();  // what came meanwhile (a wake-up then only noted it)
                      });
  }

  // Over: the source is told, the socket closes, and the server lets go of this (every caller
  // holds a reference of its own until it returns).
  void End() {
    if (ended_) return;
    ended_ = true;
    source_.Stop();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
    if (timer_) timer_->cancel();
    queue().Untrack(this);
  }

  tcp::socket socket_;
  [[maybe_unused]] Connection connection_;  // open for the listener while this lives
  SourceGuard source_;
  std::unique_ptr<asio::steady_timer> timer_;  // only once a write had to wait
  bool writing_ = false;                       // a write waits for the client
  bool ended_ = false;
};

// The same steps over TLS, in a coroutine: what resumes it.
class CoroutineWake final : public StreamWakeup {
 public:
  CoroutineWake(asio::any_io_executor strand, std::shared_ptr<Queue> queue)
      : StreamWakeup(std::move(queue)), strand_(std::move(strand)) {}
  using Handler = asio::detail::awaitable_handler<asio::any_io_executor>;

  static std::shared_ptr<CoroutineWake> Open(asio::any_io_executor strand,
                                             std::shared_ptr<Queue> queue) {
    auto wake = std::make_shared<CoroutineWake>(std::move(strand), std::move(queue));
    wake->queue().Track(wake);
    return wake;
  }
  void Close() { queue().Untrack(this); }

  // Returns once a Notify() came after the previous Wait() returned (at once if one did).
  asio::awaitable<void> Wait() {
    if (!std::exchange(woken_, false)) {
      co_await asio::async_initiate<const asio::use_awaitable_t<>, void()>(
          [this](auto handler) { handler_.emplace(std::move(handler)); }, asio::use_awaitable);
    }
    woken_ = false;
  }

 private:
  asio::any_io_executor strand() override { return strand_; }
  void Woken() override {
    woken_ = true;
    if (!handler_) return;
    Handler resume = std::move(*handler_);
    handler_.reset();
    std::move(resume)();  // runs the coroutine here, on its strand, to its next wait
  }
  // Dropping the handler hands the coroutine's unwinding to the io_context. The strand goes too,
  // while its io_context still exists: whoever still holds this wake-up (a source, a LateReply)
  // may let go of it after the server is gone, and nothing is dispatched to it any more.
  void Abandon() override {
    handler_.reset();
    strand_ = {};
  }

  asio::any_io_executor strand_;
  std::optional<Handler> handler_;  // strand only
  bool woken_ = false;              // strand only
};

template <typename Stream>
asio::awaitable<void> RunStream(Stream& stream, std::shared_ptr<StreamSource> source,
                                std::shared_ptr<StreamWakeup::Queue> queue) {
  SourceGuard guard(std::move(source));
  const std::shared_ptr<CoroutineWake> wake =
      CoroutineWake::Open(stream.get_executor(), std::move(queue));
  guard->Start(wake);
  Pieces pieces;
  std::string joined;
  while (true) {
    pieces.clear();
    const StreamSource::Step step = guard->Take(pieces);
    if (step == StreamSource::Step::kWait) {
      co_await wake->Wait();
      continue;
    }
    const bool last = step == StreamSource::Step::kEnd;
    const ChunkBuffers chunk(pieces, joined, last);
    const std::vector<asio::const_buffer> buffers(chunk.buffers().begin(), chunk.buffers().end());
    error_code ec;
    beast::get_lowest_layer(stream).expires_after(guard->write_timeout());
    co_await asio::async_write(stream, buffers, asio::redirect_error(asio::use_awaitable, ec));
    beast::get_lowest_layer(stream).expires_never();
    if (ec || last) break;
  }
  guard.Stop();
  wake->Close();
}

}  // namespace

void LateReply::Send(HttpResponse response) {
  std::shared_ptr<StreamWakeup> waiter;
  {
    MutexLock lock(mu_);
    if (std::exchange(sent_, true)) return;
    response_ = std::move(response);
    waiter = waiter_;
  }
  if (waiter) waiter->Notify();
}

// The server's side of a LateReply: a TLS connection's coroutine waits on a CoroutineWake (what a
// TLS stream waits on), a plain connection is the waiter itself (PlainConnection); Send()
// notifies the waiter; while it waits it holds no io thread, and if the server stops first the
// waiter is abandoned with the streams.
class LateReplyWaiter {
 public:
  static asio::awaitable<HttpResponse> Wait(LateReply& later, asio::any_io_executor strand,
                                            std::shared_ptr<StreamWakeup::Queue> queue) {
    std::optional<HttpResponse> response = Take(later);
    if (!response) {
      const std::shared_ptr<CoroutineWake> wake =
          CoroutineWake::Open(std::move(strand), std::move(queue));
      {
        MutexLock lock(later.mu_);
        later.waiter_ = wake;
      }
      while (!(response = Take(later))) co_await wake->Wait();
      {
        // The reply may be held on (by whoever sent it) past the server: it keeps no wake-up.
        MutexLock lock(later.mu_);
        later.waiter_.reset();
      }
      wake->Close();
    }
    co_return std::move(*response);
  }

  // For a waiter of its own: the response if it was sent, else nullopt with `waiter` to be
  // notified once it is.
  static std::optional<HttpResponse> TakeOrAwait(LateReply& later,
                                                 std::shared_ptr<StreamWakeup> waiter) {
    MutexLock lock(later.mu_);
    if (later.response_) return std::exchange(later.response_, std::nullopt);
    later.waiter_ = std::move(waiter);
    return std::nullopt;
  }
  // The response once sent (and the reply then keeps no waiter: it may be held on past the
  // server), else nullopt.
  static std::optional<HttpResponse> TakeSent(LateReply& later) {
    MutexLock lock(later.mu_);
    if (!later.response_) return std::nullopt;
    later.waiter_.reset();
    return std::exchange(later.response_, std::nullopt);
  }
  // The waiter goes away without the response.
  static void Forget(LateReply& later) {
    MutexLock lock(later.mu_);
    later.waiter_.reset();
  }

 private:
  static std::optional<HttpResponse> Take(LateReply& later) {
    MutexLock lock(later.mu_);
    return std::exchange(later.response_, std::nullopt);
  }
};

HttpResponse JsonResponse(const HttpRequest& request, unsigned status, std::string body) {
  HttpResponse res{static_cast<http::status>(status), request.version()};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(request.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

HttpResponse ErrorResponse(const HttpRequest& request, const Status& status, unsigned http_status) {
  return JsonResponse(request, http_status != 0 ? http_status : HttpStatusOf(status.code()),
                      ErrorBody(status));
}

struct HttpServer::Impl {
  Impl(HttpServerOptions o, Handler h)
      : options(std::move(o)), handler(std::move(h)), io(std::max(1, options.threads)) {}

  Status LoadTls();
  // A new connection: over plain TCP a PlainConnection, over TLS a coroutine (TlsSession); either
  // holds `connection` open for as long as it serves.
  void Session(tcp::socket socket, Connection connection);
  asio::awaitable<void> TlsSession(tcp::socket socket, Connection connection, std::string client);
  // Serves requests until the connection ends (over TLS); a stream (the last answer on a
  // connection) runs on from here.
  template <typename Stream>
  asio::awaitable<void> Serve(Stream& stream, const std::string& client, Connection& connection);
  // Writes a stream's head (`streamed.response`, made chunked) and runs the stream to its end:
  // over plain TCP without a coroutine once the head is out (ParkedStream, which takes
  // `connection`).
  template <typename Stream>
  asio::awaitable<void> RunStreamed(Stream& stream, Connection& connection, HttpReply streamed);
  // A plain connection's stream, from its PlainConnection.
  asio::awaitable<void> PlainStream(tcp::socket socket, Connection connection, HttpReply streamed);
  // The largest body any path may carry, and the one `target`'s may.
  std::size_t LargestBody() const;
  std::size_t BodyLimit(std::string_view target) const;
  // The answer to a request that could not be read (`ec`: not the client leaving): 413 for a body
  // over `body_limit`, else 400; the connection closes after it.
  HttpResponse Refusal(const error_code& ec, std::size_t body_limit) const;
  // What every response gets before it is written: the Server header, a 401's
  // WWW-Authenticate, and its count.
  void Finish(HttpResponse& res);
  // Reads one request and answers it; true to read the next. When the answer is a stream, it is
  // left in `streamed` for Serve to run once this frame (the request) is gone.
  template <typename Stream>
  asio::awaitable<bool> ServeOne(Stream& stream, beast::flat_buffer& buffer,
                                 const std::string& client, HttpReply& streamed);
  // Reads one request; nullopt when the connection is over (after an error reply, if one is due).
  template <typename Stream>
  asio::awaitable<std::optional<HttpRequest>> Read(Stream& stream, beast::flat_buffer& buffer);
  HttpReply Answer(const HttpRequest& req, const std::string& client);
  template <typename Stream>
  asio::awaitable<bool> Write(Stream& stream, HttpResponse& res);
  void Count(unsigned status) {
    MutexLock lock(mu);
    ++responses[status];
  }

  const HttpServerOptions options;
  const Handler handler;
  const std::string server_header = "drover-" + options.name;
  std::optional<ssl::context> tls;
  asio::io_context io;
  const std::shared_ptr<StreamWakeup::Queue> wakeups =
      std::make_shared<StreamWakeup::Queue>(io, options.threads);
  std::unique_ptr<TcpListener> listener;
  std::vector<std::thread> threads;
  std::once_flag stop_once;

  mutable Mutex mu;
  std::map<unsigned, std::uint64_t> responses DROVER_GUARDED_BY(mu);
};

namespace {

// A connection over plain TCP, its requests one after another without a coroutine: the bytes are
// read into the connection's buffer and parsed there (a request that came whole is one read, which
// took all there was, so the wait for the next needs no read to find the socket empty), the
// answer goes out by one send when the socket takes it, and the next request is read at once. Every
// step runs on the connection's strand (its socket's executor): after a read's wait, a LateReply's
// wake-up (this is its waiter: Woken), and a write that had to wait. What keeps it alive is the
// operation it waits on, or the LateReply it waits for; the server's list of open streams holds it
// too (Track), so a server that stops closes it (Abandon). A stream answer is handed to a coroutine
// of its own (Impl::PlainStream), which writes the head and parks the stream.
//
// Timeouts as over TLS: a request must arrive, whole, within idle_timeout of the previous answer,
// and an answer the client is slow to take must be taken within idle_timeout; while the handler
// (or a LateReply) works, nothing runs out. One timer, armed at the first wait and re-armed by its
// own handler for the deadline of the moment, so a request costs no timer operation.
class PlainConnection final : public StreamWakeup, public BurstSender {
 public:
  PlainConnection(HttpServer::Impl& server, tcp::socket socket, Connection connection,
                  std::string client)
      : StreamWakeup(server.wakeups),
        server_(server),
        socket_(std::move(socket)),
        connection_(std::move(connection)),
        client_(std::move(client)),
        timer_(socket_.get_executor()) {}

  // Starts serving, on the connection's strand -- posted, never inline: the caller is the
  // accept loop, which a handler that blocks must not hold up.
  static void Start(std::shared_ptr<PlainConnection> c) {
    const asio::any_io_executor strand = c->socket_.get_executor();
    asio::post(strand, [c = std::move(c)] {
      c->queue().Track(c);
      // Watched, a read that takes all there is counts as draining the socket, so the read after
      // an answer is skipped while nothing came (net::ReadSome); the listener registered the
      // socket for its end (watch_peer_end), so this costs no system call.
      c->watched_ = WatchPeerEnd(c->socket_);
      c->NextRequest();
      c->Run();
    });
  }

 private:
  enum class Phase : std::uint8_t {
    kRead,   // reading a request
    kAwait,  // waiting for a LateReply
    kWrite,  // writing `response_`
    kBurst,  // `response_` waits in a SendBurst, whose AfterBurst() goes on
    kDone,
  };
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kMinRead = 1024;

  std::shared_ptr<PlainConnection> self() {
    return std::static_pointer_cast<PlainConnection>(shared_from_this());
  }

  asio::any_io_executor strand() override { return socket_.get_executor(); }
  void Woken() override {
    if (phase_ != Phase::kAwait || !later_) return;
    std::optional<HttpResponse> response = LateReplyWaiter::TakeSent(*later_);
    if (!response) return;
    later_.reset();
    Respond(std::move(*response));
    Run();
  }
  void Abandon() override { End(); }

  // Takes steps while each can be taken at once; returns when one waits, or at the end. A loop,
  // so that requests that came together (pipelined) do not deepen the stack.
  void Run() {
    while (true) {
      switch (phase_) {
        case Phase::kRead:
          if (!Read()) return;
          break;
        case Phase::kWrite:
          if (!Write()) return;
          break;
        case Phase::kAwait:
        case Phase::kBurst:
        case Phase::kDone:
          return;
      }
    }
  }

  void NextRequest() {
    phase_ = Phase::kRead;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_header));
    body_limit_ = server_.LargestBody();
    parser_->body_limit(body_limit_);
    head_checked_ = false;
    deadline_ = Clock::now() + server_.options.idle_timeout;
  }

  // Parses what the buffer holds and reads more while the request is not whole. False when it
  // waits for bytes or the connection ended.
  bool Read() {
    while (true) {
      if (buffer_.size() > 0) {
        error_code ec;
        Parse(ec);
        if (ec) {
          Respond(server_.Refusal(ec, body_limit_));
          return true;
        }
        if (parser_->is_done()) {
          Answer();
          return phase_ != Phase::kAwait && phase_ != Phase::kDone;
        }
      }
      if (watched_ && KnownDrained(socket_)) {  // the last read took all there was
        WaitForBytes();
        return false;
      }
      error_code ec;
      const std::size_t room = std::max(kMinRead, buffer_.capacity() - buffer_.size());
      const std::size_t n = ReadSome(socket_, buffer_.prepare(room), ec);
      if (ec == asio::error::would_block) {
        WaitForBytes();
        return false;
      }
      if (ec) {  // the client left (or reset), mid-request or between requests
        End();
        return false;
      }
      buffer_.commit(n);
    }
  }

  void Parse(error_code& ec) {
    while (!parser_->is_done() && buffer_.size() > 0) {
      const std::size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == http::error::need_more) {
        ec = {};
        return;
      }
      if (ec) return;
      if (!head_checked_ && parser_->is_header_done()) {
        // The head's path says how large a body may be.
        head_checked_ = true;
        const auto target = parser_->get().target();
        body_limit_ = server_.BodyLimit({target.data(), target.size()});
        parser_->body_limit(body_limit_);
        if (parser_->content_length() && *parser_->content_length() > body_limit_) {
          ec = http::error::body_limit;
          return;
        }
      }
      if (used == 0) return;
    }
  }

  void WaitForBytes() {
    Watch();
    WaitReadable(socket_, [self = self()](error_code ec) {
      if (ec) return self->End();
      self->Run();
    });
  }

  void Answer() {
    HttpRequest request = parser_->release();
    parser_.reset();
    keep_alive_ = request.keep_alive();
    HttpReply reply = server_.Answer(request, client_);
    if (reply.stream) {
      // The rest of the connection is the stream's.
      phase_ = Phase::kDone;
      EndWatch();
      queue().Untrack(this);
      const asio::any_io_executor strand = socket_.get_executor();
      asio::co_spawn(
          strand, server_.PlainStream(std::move(socket_), std::move(connection_), std::move(reply)),
          asio::detached);
      return;
    }
    if (reply.later) {
      std::optional<HttpResponse> response = LateReplyWaiter::TakeOrAwait(*reply.later, self());
      if (!response) {
        phase_ = Phase::kAwait;
        later_ = std::move(reply.later);
        return;
      }
      reply.response = std::move(*response);
    }
    Respond(std::move(reply.response));
  }

  void Respond(HttpResponse response) {
    if (!keep_alive_) response.keep_alive(false);
    server_.Finish(response);
    response_.emplace(std::move(response));
    serializer_.emplace(*response_);
    phase_ = Phase::kWrite;
  }

  // Writes what the socket takes; false when the rest waits for the client or the connection
  // ended. A late reply woken with other connections' (a commit answers many writes at once) is
  // sent with them, in the drain's SendBurst.
  bool Write() {
    if (SendBurst* burst = SendBurst::Current()) {
      error_code ec;
      while (!serializer_->is_done()) {
        std::size_t size = 0;
        serializer_->next(ec, [&](error_code&, const auto& buffers) {
          for (const asio::const_buffer b : beast::buffers_range_ref(buffers)) {
            burst->Append({&b, 1});
            size += b.size();
          }
        });
        if (ec) break;
        serializer_->consume(size);
      }
      if (ec) {
        burst->Discard();
        End();
        return false;
      }
      phase_ = Phase::kBurst;
      burst->Add(self(), socket_.native_handle(), false);
      return false;
    }
    error_code ec;
    WriteNow(socket_, *serializer_, ec);
    if (ec) {
      End();
      return false;
    }
    if (!serializer_->is_done()) {
      deadline_ = Clock::now() + server_.options.idle_timeout;
      Watch();
      http::async_write(socket_, *serializer_,
                        [self = self()](error_code done, std::size_t) { self->WrittenLate(done); });
      return false;
    }
    Written();
    return phase_ != Phase::kDone;
  }

  void AfterBurst(std::string rest, bool failed, bool) override {
    if (phase_ != Phase::kBurst) return;  // ended meanwhile
    if (failed) return End();
    if (rest.empty()) {
      phase_ = Phase::kWrite;
      Written();
      return Run();
    }
    // The client is slow to read: the rest as Write() does it.
    phase_ = Phase::kWrite;
    deadline_ = Clock::now() + server_.options.idle_timeout;
    Watch();
    auto owned = std::make_unique<std::string>(std::move(rest));
    const asio::const_buffer bytes = asio::buffer(*owned);
    asio::async_write(socket_, bytes,
                      [self = self(), owned = std::move(owned)](error_code done, std::size_t) {
                        self->WrittenLate(done);
                      });
  }

  // The end of an answer's write that had to wait for the client.
  void WrittenLate(error_code done) {
    if (done) return End();
    Written();
    Run();
  }

  void Written() {
    const bool keep = response_->keep_alive();
    serializer_.reset();
    response_.reset();
    if (!keep) return End();
    NextRequest();
  }

  // The timer covers the deadline of the moment: armed when not yet (it then fires at the
  // deadline, or earlier for an older one, and re-arms itself while the connection waits).
  void Watch() {
    if (watching_) return;
    watching_ = true;
    timer_.expires_at(deadline_);
    timer_.async_wait([self = self()](error_code ec) {
      self->watching_ = false;
      if (ec || self->phase_ == Phase::kDone) return;
      // Waiting for a late reply, or its answer waiting in a burst (whose send must find this
      // socket open, its descriptor not yet anyone else's): the next wait arms it again.
      if (self->phase_ == Phase::kAwait || self->phase_ == Phase::kBurst) return;
      if (Clock::now() < self->deadline_) return self->Watch();
      // Out of time: the pending read's wait or write ends with an error, and with it this.
      error_code ignored;
      self->socket_.close(ignored);
    });
  }
  void EndWatch() {
    if (watching_) timer_.cancel();
  }

  void End() {
    if (phase_ == Phase::kDone && !socket_.is_open()) return;
    phase_ = Phase::kDone;
    if (later_) {
      LateReplyWaiter::Forget(*later_);
      later_.reset();
    }
    EndWatch();
    error_code ignored;
    if (socket_.is_open()) socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
    queue().Untrack(this);
  }

  HttpServer::Impl& server_;  // not touched once ended (the server may be gone)
  tcp::socket socket_;
  [[maybe_unused]] Connection connection_;  // open for the listener while this lives
  const std::string client_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::size_t body_limit_ = 0;
  bool head_checked_ = false;  // the head's body limit is set
  bool keep_alive_ = true;     // the request's wish
  bool watched_ = false;       // for the peer's end (net::WatchPeerEnd)
  std::shared_ptr<LateReply> later_;
  std::optional<HttpResponse> response_;
  std::optional<http::response_serializer<http::string_body>> serializer_;
  Clock::time_point deadline_{};
  bool watching_ = false;
  Phase phase_ = Phase::kRead;
};

}  // namespace

Status HttpServer::Impl::LoadTls() {
  if (options.tls_cert_file.empty() && options.tls_key_file.empty()) return Status::Ok();
  return LoadServerTls(tls.emplace(ssl::context::tls_server), options.tls_cert_file,
                       options.tls_key_file);
}

void HttpServer::Impl::Session(tcp::socket socket, Connection connection) {
  std::string client = EndpointText(connection.peer());
  if (!tls) {
    return PlainConnection::Start(std::make_shared<PlainConnection>(
        *this, std::move(socket), std::move(connection), std::move(client)));
  }
  const asio::any_io_executor executor = socket.get_executor();
  asio::co_spawn(executor, TlsSession(std::move(socket), std::move(connection), std::move(client)),
                 asio::detached);
}

asio::awaitable<void> HttpServer::Impl::TlsSession(tcp::socket socket, Connection connection,
                                                   std::string client) {
  TlsStream stream(std::move(socket), *tls);
  error_code ec;
  beast::get_lowest_layer(stream).expires_after(kTlsHandshakeTimeout);
  co_await stream.async_handshake(ssl::stream_base::server,
                                  asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    // Plain HTTP to the TLS port, a client that does not trust the certificate, a scanner: the
    // client learns it from its own TLS error; the log says who.
    spdlog::debug("{} https: handshake with {} failed: {}", options.name, client, ec.message());
    co_return;
  }
  co_await Serve(stream, client, connection);
  beast::get_lowest_layer(stream).expires_after(kTlsHandshakeTimeout);
  co_await stream.async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
}

template <typename Stream>
asio::awaitable<void> HttpServer::Impl::Serve(Stream& stream, const std::string& client,
                                              Connection& connection) {
  HttpReply streamed;
  {
    beast::flat_buffer buffer;
    while (co_await ServeOne(stream, buffer, client, streamed)) {
    }
  }
  // A stream may stay open for days, mostly idle: it keeps no request and no read buffer.
  if (streamed.stream) co_await RunStreamed(stream, connection, std::move(streamed));
}

template <typename Stream>
asio::awaitable<void> HttpServer::Impl::RunStreamed(Stream& stream, Connection& connection,
                                                    HttpReply streamed) {
  SourceGuard source(std::move(streamed.stream));
  HttpResponse& head = streamed.response;
  head.chunked(true);
  if (head.find(http::field::server) == head.end()) head.set(http::field::server, server_header);
  Count(head.result_int());
  beast::get_lowest_layer(stream).expires_never();
  error_code ec;
  {
    http::response_serializer<http::string_body> serializer{head};
    co_await http::async_write_header(stream, serializer,
                                      asio::redirect_error(asio::use_awaitable, ec));
  }
  if (ec) co_return;
  streamed.response = HttpResponse();  // its fields are written: not kept for the stream's life
  if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
    // From here on without this coroutine (ParkedStream): it ends, and its frames with it.
    ParkedStream::Start(std::make_shared<ParkedStream>(
        stream.release_socket(), std::move(connection), source.Release(), wakeups));
  } else {
    co_await RunStream(stream, source.Release(), wakeups);
  }
}

asio::awaitable<void> HttpServer::Impl::PlainStream(tcp::socket socket, Connection connection,
                                                    HttpReply streamed) {
  beast::tcp_stream stream(std::move(socket));
  co_await RunStreamed(stream, connection, std::move(streamed));
}

template <typename Stream>
asio::awaitable<bool> HttpServer::Impl::ServeOne(Stream& stream, beast::flat_buffer& buffer,
                                                 const std::string& client, HttpReply& streamed) {
  std::optional<HttpRequest> req = co_await Read(stream, buffer);
  if (!req) co_return false;
  HttpReply reply = Answer(*req, client);
  if (reply.stream) {
    streamed = std::move(reply);
    co_return false;
  }
  if (reply.later) {
    reply.response = co_await LateReplyWaiter::Wait(*reply.later, stream.get_executor(), wakeups);
  }
  if (!req->keep_alive()) reply.response.keep_alive(false);
  co_return co_await Write(stream, reply.response);
}

template <typename Stream>
asio::awaitable<std::optional<HttpRequest>> HttpServer::Impl::Read(Stream& stream,
                                                                   beast::flat_buffer& buffer) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(options.max_header));
  beast::get_lowest_layer(stream).expires_after(options.idle_timeout);
  error_code ec;
  // The head first: its path says how large a body may be. The parser checks a Content-Length
  // when the head ends (against the largest limit, here), and chunked bodies as they come.
  std::size_t body_limit = LargestBody();
  parser.body_limit(body_limit);
  co_await http::async_read_header(stream, buffer, parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) {
    body_limit = BodyLimit({parser.get().target().data(), parser.get().target().size()});
    parser.body_limit(body_limit);
    if (parser.content_length() && *parser.content_length() > body_limit) {
      ec = http::error::body_limit;
    } else {
      ParseBuffered(parser, buffer, ec);
      if (!ec && !parser.is_done()) {
        co_await http::async_read(stream, buffer, parser,
                                  asio::redirect_error(asio::use_awaitable, ec));
      }
    }
  }
  if (!ec) co_return parser.release();
  if (ClientLeft(ec)) co_return std::nullopt;
  HttpResponse res = Refusal(ec, body_limit);
  co_await Write(stream, res);
  co_return std::nullopt;
}

std::size_t HttpServer::Impl::LargestBody() const {
  std::size_t limit = options.max_body;
  for (const auto& [prefix, larger] : options.larger_bodies) limit = std::max(limit, larger);
  return limit;
}

std::size_t HttpServer::Impl::BodyLimit(std::string_view target) const {
  std::size_t limit = options.max_body;
  for (const auto& [prefix, larger] : options.larger_bodies) {
    if (target.starts_with(prefix)) limit = std::max(limit, larger);
  }
  return limit;
}

HttpResponse HttpServer::Impl::Refusal(const error_code& ec, std::size_t body_limit) const {
  // A malformed or oversized request: answered once, then the connection closes (the stream is
  // out of sync).
  HttpRequest bad;
  bad.version(11);
  HttpResponse res =
      ec == http::error::body_limit
          ? ErrorResponse(
                bad,
                ResourceExhaustedError("body larger than " + std::to_string(body_limit) + " bytes"),
                413)
          : ErrorResponse(bad, InvalidArgumentError("malformed HTTP request: " + ec.message()));
  res.keep_alive(false);
  return res;
}

HttpReply HttpServer::Impl::Answer(const HttpRequest& req, const std::string& client) {
  try {
    return handler(req, client);
  } catch (const std::exception& e) {
    // Handlers return statuses; reaching here is a bug, and the client still gets an answer.
    spdlog::error("{} http: {} {} failed: {}", options.name, std::string(req.method_string()),
                  std::string(req.target()), e.what());
    return ErrorResponse(req, InternalError("internal error"));
  }
}

template <typename Stream>
asio::awaitable<bool> HttpServer::Impl::Write(Stream& stream, HttpResponse& res) {
  Finish(res);
  error_code ec;
  http::response_serializer<http::string_body> serializer{res};
  co_await http::async_write(stream, serializer, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec && res.keep_alive();
}

void HttpServer::Impl::Finish(HttpResponse& res) {
  if (res.find(http::field::server) == res.end()) res.set(http::field::server, server_header);
  if (res.result() == http::status::unauthorized &&
      res.find(http::field::www_authenticate) == res.end()) {
    res.set(http::field::www_authenticate, "Bearer realm=\"" + server_header + "\"");
  }
  Count(res.result_int());
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options, Handler handler) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  DROVER_RETURN_IF_ERROR(impl->LoadTls());
  Impl* raw = impl.get();
  ListenerOptions lo;
  lo.name = raw->options.name + " http";
  lo.address = raw->options.address;
  lo.max_connections = raw->options.max_connections;
  if (!raw->tls) lo.refusal = BusyReply(raw->options.name);
  // TCP_NODELAY: a watch stream's small chunks must not wait behind the client's delayed ACK
  // (Nagle held them up to 40 ms). Keepalive probes: a watcher whose host died is let go.
  lo.keep_alive = true;
  lo.watch_peer_end = true;  // (a PlainConnection watches its socket: see Start)
  // Each connection gets its own strand: its coroutine and the wake-ups of a stream it serves
  // never run concurrently.
  DROVER_ASSIGN_OR_RETURN(impl->listener,
                          TcpListener::Start(
                              raw->io, std::move(lo), [raw] { return asio::make_strand(raw->io); },
                              [raw](tcp::socket socket, Connection connection) {
                                raw->Session(std::move(socket), std::move(connection));
                              }));
  for (int i = 0; i < std::max(1, raw->options.threads); ++i) {
    impl->threads.emplace_back([raw] {
      NameThisThread("http-" + raw->options.name);
      raw->io.run();
    });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

std::uint16_t HttpServer::port() const { return impl_->listener->port(); }
bool HttpServer::tls() const { return impl_->tls.has_value(); }
const ConnectionCounters& HttpServer::connections() const { return impl_->listener->counters(); }

std::map<unsigned, std::uint64_t> HttpServer::responses() const {
  MutexLock lock(impl_->mu);
  return impl_->responses;
}

void HttpServer::StopAccepting() { impl_->listener->StopAccepting(); }

void HttpServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->listener->StopAccepting();
    impl_->wakeups->Stop();
    impl_->io.stop();
    for (std::thread& t : impl_->threads) t.join();
    impl_->wakeups->Release();
  });
}

}  // namespace drover::net
