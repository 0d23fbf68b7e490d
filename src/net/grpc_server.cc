#include "net/grpc_server.h"

#include <arpa/inet.h>
#include <nghttp2/nghttp2.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>

#include "common/allocator.h"
#include "common/thread_name.h"
#include "drover/mutex.h"
#include "net/sockets.h"
#include "net/tcp_listener.h"
#include "net/tls_context.h"

namespace drover::net {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kPrefix = 5;  // a gRPC message's compressed flag and length
// What a connection writes before it asks nghttp2 for more (and waits for the socket, if full).
constexpr std::size_t kWriteChunk = 256 * 1024;
constexpr std::uint32_t kMaxConcurrentStreams = 10'000;  // per connection
// A buffer emptied is kept for the next turn up to this size, and freed beyond it.
constexpr std::size_t kKeptBuffer = 64 * 1024;
constexpr std::size_t kKeptQueue = 64;  // messages
// Once a message this large has gone, the io thread gives the allocator's free memory back to
// the system (see Flush).
constexpr std::size_t kLargeMessage = 1024 * 1024;

// grpc-message is percent-encoded: bytes outside printable ASCII, and '%'.
std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e || u == '%') {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// A call's end as gRPC's headers: grpc-status, and grpc-message (percent-encoded) when there is
// one. nghttp2 copies them when they are submitted.
struct StatusFields {
  explicit StatusFields(const Status& status)
      : code(std::to_string(static_cast<int>(status.code()))),
        message(PercentEncode(status.message())) {}
  std::string code;
  std::string message;
};

nghttp2_nv Header(std::string_view name, std::string_view value) {
  // nghttp2 copies names and values when the frame is submitted (no NO_COPY flags).
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

// The connection being served by this thread right now: answers given inside its turn are taken
// at the turn's end, without a post.
thread_local GrpcConnection* t_in_turn = nullptr;

}  // namespace

// The server's open connections, so that Stop() can wait for them and close what remains.
struct GrpcOpenConnections {
  Mutex mu;
  std::unordered_map<GrpcConnection*, std::shared_ptr<GrpcConnection>> open DROVER_GUARDED_BY(mu);
  std::size_t size() {
    MutexLock lock(mu);
    return open.size();
  }
};

// One HTTP/2 connection and its calls; lives on one io thread (its socket's executor).
class GrpcConnection : public std::enable_shared_from_this<GrpcConnection> {
 public:
  GrpcConnection(tcp::socket socket, Connection connection,
                 const std::unordered_map<std::string, GrpcMethod>& methods,
                 const GrpcServerOptions& options, std::shared_ptr<GrpcOpenConnections> open,
                 asio::ssl::context* tls)
      : socket_(std::move(socket)),
        connection_(std::move(connection)),
        methods_(methods),
        options_(options),
        open_(std::move(open)) {
    if (tls == nullptr) return;
    // TLS through memory buffers: the socket's bytes go in, the plaintext comes out to HTTP/2,
    // and the other way round, in the same non-blocking turn as a plain connection's.
    ssl_ = SSL_new(tls->native_handle());
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl_, in, out);  // the SSL owns both
    SSL_set_accept_state(ssl_);
  }
  ~GrpcConnection() {
    if (session_ != nullptr) nghttp2_session_del(session_);
    if (ssl_ != nullptr) SSL_free(ssl_);
  }

  void Start() {
    {
      MutexLock lock(open_->mu);
      open_->open.emplace(this, shared_from_this());
    }
    nghttp2_session_server_new(&session_, Callbacks(), this);
    const std::array<nghttp2_settings_entry, 2> settings{
        {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
         {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(std::min<std::size_t>(
                                                     options_.max_metadata_bytes, UINT32_MAX))}}};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
    connection_.OnClose([weak = weak_from_this()](CloseReason reason) {
      if (auto self = weak.lock()) self->OnListenerClose(reason);
    });
    // A client that connects and then says nothing (no TLS handshake, no HTTP/2 preface) would
    // hold its connection for good: TCP's keepalive finds only dead peers.
    Arm(handshake_, options_.handshake_timeout, spdlog::level::debug, "sent no HTTP/2 preface");
    Flush();
    Read();
  }

  // From any thread: `call` has something to send or its end.
  void Listed(GrpcCall* call) DROVER_REQUIRES(mu_) {
    ready_.push_back(call->shared_from_this());
    if (t_in_turn != this) PostTurn();
  }

  Mutex& mu() DROVER_RETURN_CAPABILITY(mu_) { return mu_; }

 private:
  friend class GrpcCall;

  // nghttp2's callbacks, the same for every connection: made once.
  static const nghttp2_session_callbacks* Callbacks() {
    static nghttp2_session_callbacks* const callbacks = [] {
      nghttp2_session_callbacks* made = nullptr;
      nghttp2_session_callbacks_new(&made);
      nghttp2_session_callbacks_set_on_begin_headers_callback(made, &OnBeginHeaders);
      nghttp2_session_callbacks_set_on_header_callback(made, &OnHeader);
      nghttp2_session_callbacks_set_on_frame_recv_callback(made, &OnFrameRecv);
      nghttp2_session_callbacks_set_on_data_chunk_recv_callback(made, &OnDataChunk);
      nghttp2_session_callbacks_set_on_stream_close_callback(made, &OnStreamClose);
      nghttp2_session_callbacks_set_on_frame_send_callback(made, &OnFrameSent);
      return made;
    }();
    return callbacks;
  }

  static GrpcConnection& Of(void* user) { return *static_cast<GrpcConnection*>(user); }
  GrpcCall* CallOf(std::int32_t stream_id) {
    return static_cast<GrpcCall*>(nghttp2_session_get_stream_user_data(session_, stream_id));
  }

  // ---- reading

  void Read() {
    WaitReadable(socket_, [self = shared_from_this()](error_code ec) {
      if (ec) return self->Close();
      self->OnReadable();
    });
  }

  void OnReadable() {
    thread_local std::array<std::uint8_t, 64 * 1024> buffer;
    t_in_turn = this;
    bool open = true;
    bool ended = false;  // the client's end of its side: what it sent before is still answered
    while (open) {
      error_code ec;
      const std::size_t n = ReadSome(socket_, asio::buffer(buffer), ec);
      if (ec == asio::error::would_block) break;
      if (ec) {
        ended = ec == asio::error::eof;
        open = false;
        break;
      }
      open = ssl_ != nullptr ? Decrypt(buffer.data(), n) : Receive(buffer.data(), n);
      if (n < buffer.size()) break;
    }
    if (open || ended) {
      TakeAnswers();
      open = Flush() && open;
    }
    t_in_turn = nullptr;
    if (!open || Finished()) return Close();
    // While the socket takes no more (the client is not reading), nothing more is read either:
    // its requests would only pile up answers. The wait for room resumes reading.
    if (writing_) {
      read_paused_ = true;
      return;
    }
    Read();
  }

  bool Receive(const std::uint8_t* data, std::size_t n) {
    return nghttp2_session_mem_recv(session_, data, n) >= 0;
  }

  // TLS: the socket's bytes into the SSL, and what it decrypts on to HTTP/2 (the handshake's
  // answers wait in its output for Flush).
  bool Decrypt(const std::uint8_t* data, std::size_t n) {
    thread_local std::array<std::uint8_t, 64 * 1024> plain;
    if (BIO_write(SSL_get_rbio(ssl_), data, static_cast<int>(n)) != static_cast<int>(n)) {
      return false;
    }
    while (true) {
      // SSL_get_error reads the thread's error queue, which another connection's failure may
      // have left behind on this io thread.
      ERR_clear_error();
      const int got = SSL_read(ssl_, plain.data(), static_cast<int>(plain.size()));
      if (got > 0) {
        if (!Receive(plain.data(), static_cast<std::size_t>(got))) return false;
        continue;
      }
      const int error = SSL_get_error(ssl_, got);
      if (error == SSL_ERROR_WANT_READ) return true;
      if (error != SSL_ERROR_ZERO_RETURN && SSL_is_init_finished(ssl_) == 0) {
        spdlog::debug("{}: TLS handshake with {} failed", options_.name,
                      connection_.peer().address().to_string());
      }
      ERR_clear_error();
      return false;  // the client's close_notify, or an error
    }
  }

  // ---- nghttp2's callbacks (on the connection's thread)

  static int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    GrpcConnection& self = Of(user);
    auto call = std::make_shared<GrpcCall>(GrpcCall::Key(), self.shared_from_this(),
                                           frame->hd.stream_id, self.connection_.peer());
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, call.get());
    self.calls_.emplace(frame->hd.stream_id, std::move(call));
    return 0;
  }

  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                      std::size_t name_length, const std::uint8_t* value, std::size_t value_length,
                      std::uint8_t, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    GrpcConnection& self = Of(user);
    GrpcCall* call = self.CallOf(frame->hd.stream_id);
    // A refused call's headers are not kept.
    if (call == nullptr || call->too_large_ != GrpcCall::TooLarge::kNo) return 0;
    const std::size_t list_bytes = call->header_list_bytes_ + name_length + value_length + 32;
    if (list_bytes > self.options_.max_metadata_bytes) {
      return self.DropHeaders(*call, GrpcCall::TooLarge::kMetadata);
    }
    call->header_list_bytes_ = static_cast<std::uint32_t>(list_bytes);
    const std::string_view n(reinterpret_cast<const char*>(name), name_length);
    const std::string_view v(reinterpret_cast<const char*>(value), value_length);
    if (n == ":path") {
      call->method_.assign(v);
    } else if (n == ":method") {
      call->post_ = v == "POST";
    } else if (n == "content-type") {
      call->grpc_content_ = v.starts_with("application/grpc");
    } else if (n == "grpc-encoding" && v == "identity") {
      // the only encoding served; any other is kept, and refused by Admit
    } else if (n == "te" || n == "user-agent" || n == "grpc-accept-encoding" ||
               n == "accept-encoding" || n == "grpc-timeout") {
      // gRPC's own headers, not kept: an idle stream holds only its metadata (the client ends a
      // call whose deadline passed by itself, with RST_STREAM)
    } else if (!n.empty() && n.front() != ':') {
      if (!self.Hold(name_length + value_length + 2)) {
        return self.DropHeaders(*call, GrpcCall::TooLarge::kConnection);
      }
      call->headers_.append(n).push_back('\0');
      call->headers_.append(v).push_back('\0');
    }
    return 0;
  }

  static int OnDataChunk(nghttp2_session*, std::uint8_t, std::int32_t stream_id,
                         const std::uint8_t* data, std::size_t length, void* user) {
    GrpcConnection& self = Of(user);
    GrpcCall* call = self.CallOf(stream_id);
    if (call == nullptr || call->refused_) return 0;
    const bool whole =
        call->handler_ == nullptr || call->handler_->kind != GrpcMethod::Kind::kBidiStreaming;
    std::optional<Status> refusal;
    if (whole &&
        call->request_.size() + length > self.options_.max_receive_message_bytes + kPrefix) {
      refusal = Status(StatusCode::kResourceExhausted,
                       "request larger than " +
                           std::to_string(self.options_.max_receive_message_bytes) + " bytes");
    } else if (!self.Hold(length)) {
      refusal = self.OverBound();
    }
    if (refusal) {
      call->refused_ = true;
      self.Release(call->request_.size());
      call->request_ = std::string();
      self.Refuse(*call, *refusal);
      return 0;
    }
    call->request_.append(reinterpret_cast<const char*>(data), length);
    if (call->handler_ != nullptr && call->handler_->kind == GrpcMethod::Kind::kBidiStreaming) {
      self.DeliverMessages(*call);
    }
    return 0;
  }

  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    GrpcConnection& self = Of(user);
    // The client's preface (checked by libnghttp2) and first SETTINGS: the handshake is done.
    if (frame->hd.type == NGHTTP2_SETTINGS) Disarm(self.handshake_);
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    GrpcCall* call = self.CallOf(frame->hd.stream_id);
    if (call == nullptr || call->refused_) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      if (Status s = self.Admit(*call); !s.ok()) {
        call->refused_ = true;
        self.Refuse(*call, s);
        return 0;
      }
      if (call->handler_->on_open) call->handler_->on_open(call->shared_from_this());
    }
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      if (call->handler_->kind == GrpcMethod::Kind::kBidiStreaming) {
        if (!call->request_.empty()) {
          self.Refuse(*call, Status(StatusCode::kInternal, "the request ends inside a message"));
        } else if (call->handler_->on_half_close) {
          call->handler_->on_half_close(call->shared_from_this());
        }
      } else {
        self.Dispatch(*call);
      }
    }
    return 0;
  }

  // The call's end went out while the client is still sending (a refusal, a stream ended by the
  // server): what it sends next is not wanted, and RST_STREAM with NO_ERROR after the trailers
  // says so (as gRPC's own server does; its clients take the status from the trailers).
  static int OnFrameSent(nghttp2_session* session, const nghttp2_frame* frame, void*) {
    if (frame->hd.type != NGHTTP2_HEADERS || (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
      return 0;
    }
    if (nghttp2_session_get_stream_remote_close(session, frame->hd.stream_id) == 0) {
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    }
    return 0;
  }

  static int OnStreamClose(nghttp2_session*, std::int32_t stream_id, std::uint32_t, void* user) {
    GrpcConnection& self = Of(user);
    auto it = self.calls_.find(stream_id);
    if (it == self.calls_.end()) return 0;
    std::shared_ptr<GrpcCall> call = std::move(it->second);
    self.calls_.erase(it);
    self.End(*call);
    return 0;
  }

  // ---- calls

  Status Admit(GrpcCall& call) {
    if (call.too_large_ == GrpcCall::TooLarge::kMetadata) {
      return Status(
          StatusCode::kResourceExhausted,
          "request metadata larger than " + std::to_string(options_.max_metadata_bytes) + " bytes");
    }
    if (call.too_large_ == GrpcCall::TooLarge::kConnection) return OverBound();
    const auto method = methods_.find(call.method_);
    if (!call.post_) return Status(StatusCode::kUnimplemented, "gRPC calls are POSTs");
    if (!call.grpc_content_) {
      return Status(StatusCode::kInvalidArgument, "content-type is not application/grpc");
    }
    const std::string_view encoding = call.Metadata("grpc-encoding");
    if (!encoding.empty() && encoding != "identity") {
      return Status(StatusCode::kUnimplemented,
                    "grpc-encoding " + std::string(encoding) + " is not supported");
    }
    if (method == methods_.end()) {
      return Status(StatusCode::kUnimplemented, "unknown method " + call.method_);
    }
    call.handler_ = &method->second;
    call.method_ = std::string();  // method() is the handler's path from now on
    return Status();
  }

  // Bytes a call is to hold of its request before its handler takes them (its metadata, a message
  // not yet whole), counted against the connection's bound: false, and nothing counted, when they
  // would take the connection past it. What a call holds is its headers_ and request_.
  bool Hold(std::size_t bytes) {
    if (held_bytes_ + bytes > options_.max_connection_buffered_bytes) return false;
    held_bytes_ += bytes;
    return true;
  }
  void Release(std::size_t bytes) { held_bytes_ -= bytes; }
  // A call's headers go past a bound: it will be refused, and keeps none of them.
  int DropHeaders(GrpcCall& call, GrpcCall::TooLarge why) {
    call.too_large_ = why;
    Release(call.headers_.size());
    call.headers_ = std::string();
    return 0;
  }
  Status OverBound() const {
    return Status(StatusCode::kResourceExhausted,
                  "this connection's calls hold more than " +
                      std::to_string(options_.max_connection_buffered_bytes) +
                      " bytes of unfinished requests");
  }

  // Bidirectional: hands over each whole message the request's bytes hold.
  void DeliverMessages(GrpcCall& call) {
    std::size_t used = 0;
    while (!call.refused_ && call.request_.size() - used >= kPrefix) {
      const char* at = call.request_.data() + used;
      std::uint32_t length = 0;
      std::memcpy(&length, at + 1, sizeof length);
      length = ntohl(length);
      if (at[0] != 0) {
        return Refuse(call, Status(StatusCode::kUnimplemented, "compressed messages unsupported"));
      }
      if (length > options_.max_receive_message_bytes) {
        return Refuse(call,
                      Status(StatusCode::kResourceExhausted,
                             "message larger than " +
                                 std::to_string(options_.max_receive_message_bytes) + " bytes"));
      }
      if (call.request_.size() - used < kPrefix + length) break;
      used += kPrefix + length;
      call.handler_->on_request(call.shared_from_this(), std::string_view(at + kPrefix, length));
    }
    call.request_.erase(0, used);
    Release(used);
  }

  void Dispatch(GrpcCall& call) {
    const std::string& r = call.request_;
    if (r.size() < kPrefix) {
      return Refuse(call, Status(StatusCode::kInternal, "the request holds no message"));
    }
    std::uint32_t length = 0;
    std::memcpy(&length, r.data() + 1, sizeof length);
    length = ntohl(length);
    if (r[0] != 0) {
      return Refuse(call, Status(StatusCode::kUnimplemented, "compressed messages unsupported"));
    }
    if (r.size() != kPrefix + length) {
      return Refuse(call, Status(StatusCode::kInternal, "the request is not one whole message"));
    }
    std::string request = std::move(call.request_);
    call.request_ = std::string();
    Release(request.size());
    call.handler_->on_request(call.shared_from_this(), std::string_view(request).substr(kPrefix));
  }

  // Ends `call` at once with `status` (trailers only; then the client's side is reset, see
  // OnFrameSent). What comes of the request meanwhile is dropped.
  void Refuse(GrpcCall& call, const Status& status) {
    MutexLock lock(mu_);
    if (call.finish_ || call.done_) return;
    call.finish_ = status;
    if (!std::exchange(call.listed_, true)) Listed(&call);
  }

  // The stream closed (answered, reset by the client, or the connection ended).
  void End(GrpcCall& call) {
    bool answered = false;
    {
      MutexLock lock(mu_);
      call.done_ = true;
      answered = call.finish_.has_value();
      call.pending_.clear();
      call.pending_bytes_ = 0;
    }
    // Its metadata stays for whoever still holds the call, but no longer counts: the stream is
    // over.
    Release(call.headers_.size() + call.request_.size());
    call.request_ = std::string();
    if (!answered && call.on_cancel_) std::exchange(call.on_cancel_, nullptr)();
    call.on_cancel_ = nullptr;
    if (call.on_close_) std::exchange(call.on_close_, nullptr)();
    call.on_wake_ = nullptr;
    call.context.reset();
  }

  // Hands what the calls queued to nghttp2 -- response headers, messages, trailers -- and runs
  // the wake-ups of streams' producers (whose writes are taken in the next round).
  void TakeAnswers() {
    for (int round = 0; round < 8; ++round) {
      std::vector<std::shared_ptr<GrpcCall>> ready;
      std::vector<std::shared_ptr<GrpcCall>> woken;
      {
        MutexLock lock(mu_);
        posted_ = false;
        ready.swap(ready_);
        for (const auto& call : ready) {
          call->listed_ = false;
          call->done_unlocked_ = call->done_;
          if (call->done_) continue;
          if (call->headers_asked_) {
            call->extra_headers_ = std::move(*call->headers_asked_);
            call->headers_asked_.reset();
            call->headers_wanted_ = true;
          }
          for (auto& message : call->pending_) {
            call->out_bytes_ += kPrefix + message->size();
            call->out_.push_back(std::move(message));
          }
          call->pending_.clear();
          call->pending_bytes_ = 0;
          if (call->finish_ && !call->status_) call->status_ = *call->finish_;
          if (std::exchange(call->wake_, false)) woken.push_back(call);
        }
      }
      for (const auto& call : ready) {
        if (!call->done_unlocked_) Submit(*call);
      }
      for (const auto& call : woken) {
        if (call->on_wake_ && !call->closed_by_us_) call->on_wake_();
      }
      MutexLock lock(mu_);
      if (ready_.empty()) return;
    }
    // A producer that keeps writing from its wake-up: the rest in a later turn.
    MutexLock lock(mu_);
    PostTurn();
  }

  // A turn of the connection's thread for what other threads queued (one at a time).
  void PostTurn() DROVER_REQUIRES(mu_) {
    if (posted_ || closed_) return;
    posted_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      t_in_turn = self.get();
      self->TakeAnswers();
      const bool open = self->Flush();
      t_in_turn = nullptr;
      if (!open || self->Finished()) self->Close();
    });
  }

  void Submit(GrpcCall& call) {
    if (call.closed_by_us_) return;
    if (!call.headers_sent_) {
      if (call.out_bytes_ == 0 && !call.status_ && !call.headers_wanted_) return;  // a wake-up
      call.headers_sent_ = true;
      if (call.out_bytes_ == 0 && call.status_ && call.extra_headers_.empty()) {  // trailers only
        const StatusFields end(*call.status_);
        std::array<nghttp2_nv, 4> headers{
            Header(":status", "200"), Header("content-type", "application/grpc"),
            Header("grpc-status", end.code), Header("grpc-message", end.message)};
        nghttp2_submit_response(session_, call.stream_id_, headers.data(),
                                end.message.empty() ? 3 : 4, nullptr);
        call.closed_by_us_ = true;
        return;
      }
      std::vector<nghttp2_nv> headers{Header(":status", "200"),
                                      Header("content-type", "application/grpc")};
      for (const auto& [name, value] : call.extra_headers_) headers.push_back(Header(name, value));
      nghttp2_data_provider provider{};
      provider.source.ptr = &call;
      provider.read_callback = &ReadData;
      nghttp2_submit_response(session_, call.stream_id_, headers.data(), headers.size(), &provider);
      call.extra_headers_.clear();
      return;
    }
    nghttp2_session_resume_data(session_, call.stream_id_);
  }

  static ssize_t ReadData(nghttp2_session* session, std::int32_t stream_id, std::uint8_t* buffer,
                          std::size_t length, std::uint32_t* flags, nghttp2_data_source* source,
                          void*) {
    auto& call = *static_cast<GrpcCall*>(source->ptr);
    // The queued messages, each framed as it is copied out: a 5-byte prefix, then its bytes.
    std::size_t n = 0;
    while (n < length && call.next_ < call.out_.size()) {
      const std::string& message = *call.out_[call.next_];
      if (call.offset_ < kPrefix) {
        std::array<std::uint8_t, kPrefix> prefix{};
        const std::uint32_t size = htonl(static_cast<std::uint32_t>(message.size()));
        std::memcpy(prefix.data() + 1, &size, sizeof size);
        const std::size_t take = std::min(length - n, kPrefix - call.offset_);
        std::memcpy(buffer + n, prefix.data() + call.offset_, take);
        n += take;
        call.offset_ += take;
        continue;
      }
      const std::size_t at = call.offset_ - kPrefix;
      const std::size_t take = std::min(length - n, message.size() - at);
      std::memcpy(buffer + n, message.data() + at, take);
      n += take;
      call.offset_ += take;
      if (call.offset_ == kPrefix + message.size()) {
        if (message.size() >= kLargeMessage) call.connection_->large_sent_ = true;
        call.out_[call.next_++].reset();
        call.offset_ = 0;
      }
    }
    call.out_bytes_ -= n;
    if (call.next_ == call.out_.size()) {
      call.out_.clear();
      if (call.out_.capacity() > kKeptQueue) call.out_.shrink_to_fit();
      call.next_ = 0;
      if (std::exchange(call.wake_when_drained_, false)) call.Notify();
      if (call.status_) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        const StatusFields end(*call.status_);
        std::array<nghttp2_nv, 2> trailers{Header("grpc-status", end.code),
                                           Header("grpc-message", end.message)};
        nghttp2_submit_trailer(session, stream_id, trailers.data(), end.message.empty() ? 1 : 2);
        call.closed_by_us_ = true;
      } else if (n == 0) {
        return NGHTTP2_ERR_DEFERRED;
      }
    }
    return static_cast<ssize_t>(n);
  }

  // ---- writing

  // Sends what nghttp2 has; false when the connection is to close.
  bool Flush() {
    if (writing_) return true;  // the write in flight takes the rest
    bool progressed = false;    // bytes went: the stalled-write deadline starts again
    while (true) {
      if (ssl_ == nullptr || SSL_is_init_finished(ssl_) != 0) {
        while (out_.size() - sent_ < kWriteChunk) {
          const std::uint8_t* data = nullptr;
          const ssize_t n = nghttp2_session_mem_send(session_, &data);
          if (n < 0) return false;
          if (n == 0) break;
          if (ssl_ == nullptr) {
            out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
          } else if (!Encrypt(data, static_cast<std::size_t>(n))) {
            return false;
          }
        }
      }
      if (ssl_ != nullptr) TakeEncrypted();  // the handshake's own bytes too
      if (out_.size() == sent_) {
        // An idle connection keeps no buffer that a burst grew.
        if (out_.capacity() > kKeptBuffer) {
          out_ = std::string();
        } else {
          out_.clear();
        }
        sent_ = 0;
        // A large answer (a List of every instance: tens of MB of messages and their encoding,
        // made and freed on this thread) leaves that memory free in the allocator, where it stays
        // resident: a registry that answered one List of 100,000 instances held 75 MB more than
        // before it (measured, docs/ARCHITECTURE.md). Given back once its buffers are gone.
        if (std::exchange(large_sent_, false)) drover::ReleaseFreeMemory();
        Disarm(write_);  // nothing waits now
        return true;
      }
      error_code ec;
      const std::array<asio::const_buffer, 1> piece{
          asio::buffer(out_.data() + sent_, out_.size() - sent_)};
      const std::size_t n = WriteSome(socket_, piece, ec);
      if (ec == asio::error::would_block) break;
      if (ec) return false;
      sent_ += n;
      progressed = true;
    }
    writing_ = true;
    // Some bytes must go within the write timeout, or the client is taken to have stopped
    // reading; each write that goes starts it again.
    if (progressed || write_.timer == nullptr) {
      Arm(write_, options_.write_timeout, spdlog::level::info, "read none of its answers");
    }
    socket_.async_wait(tcp::socket::wait_write, [self = shared_from_this()](error_code ec) {
      self->writing_ = false;
      if (ec || !self->Flush() || self->Finished()) return self->Close();
      if (!self->writing_ && std::exchange(self->read_paused_, false)) self->Read();
    });
    return true;
  }

  // A time by which something must have happened, or the connection closes (Arm, Disarm).
  struct Deadline {
    std::unique_ptr<asio::steady_timer> timer;  // none while disarmed
    std::uint64_t armed = 0;                    // which of the timer's waits is the current one
  };

  // (Re)starts `deadline` (a member of this connection): once `timeout` passes, the connection
  // is closed, with a log line naming the peer and what it did not do (`what`).
  void Arm(Deadline& deadline, std::chrono::milliseconds timeout, spdlog::level::level_enum level,
           const char* what) {
    if (deadline.timer == nullptr) {
      deadline.timer = std::make_unique<asio::steady_timer>(socket_.get_executor());
    }
    const std::uint64_t armed = ++deadline.armed;
    deadline.timer->expires_after(timeout);  // a previous wait ends, aborted
    deadline.timer->async_wait(
        [weak = weak_from_this(), &deadline, armed, timeout, level, what](error_code ec) {
          auto self = weak.lock();  // (`deadline` lives as long as the connection)
          // A wait re-armed or disarmed since may still complete: it is not the current one.
          if (ec || self == nullptr || deadline.armed != armed) return;
          spdlog::log(level, "{}: {} {} within {} ms; closed", self->options_.name,
                      EndpointText(self->connection_.peer()), what, timeout.count());
          self->Close();
        });
  }
  static void Disarm(Deadline& deadline) {
    if (deadline.timer == nullptr) return;
    ++deadline.armed;
    deadline.timer.reset();
  }

  // TLS: HTTP/2's bytes through the SSL into out_ (a memory buffer takes them all).
  bool Encrypt(const std::uint8_t* data, std::size_t n) {
    ERR_clear_error();
    if (SSL_write(ssl_, data, static_cast<int>(n)) != static_cast<int>(n)) {
      ERR_clear_error();
      return false;
    }
    TakeEncrypted();
    return true;
  }

  void TakeEncrypted() {
    BIO* encrypted = SSL_get_wbio(ssl_);
    while (BIO_ctrl_pending(encrypted) > 0) {
      const std::size_t at = out_.size();
      const std::size_t n = BIO_ctrl_pending(encrypted);
      out_.resize(at + n);
      const int got = BIO_read(encrypted, out_.data() + at, static_cast<int>(n));
      out_.resize(at + static_cast<std::size_t>(std::max(got, 0)));
      if (got <= 0) break;
    }
  }

  bool Finished() const {
    return nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0 &&
           out_.size() == sent_;
  }

  // ---- the end

  void OnListenerClose(CloseReason reason) {
    if (reason == CloseReason::kCloseNow) return Close();
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                          nullptr, 0);
    if (!Flush() || Finished()) Close();
  }

  // On the connection's thread, or once the io threads are gone, on the stopping thread.
  void Close() {
    {
      MutexLock lock(mu_);
      if (closed_) return;
      closed_ = true;
    }
    auto self = shared_from_this();  // the open list's reference goes below
    Disarm(handshake_);
    Disarm(write_);
    error_code ignored;
    socket_.close(ignored);
    std::unordered_map<std::int32_t, std::shared_ptr<GrpcCall>> calls;
    calls.swap(calls_);
    for (auto& [id, call] : calls) End(*call);
    connection_.OnClose(nullptr);
    MutexLock lock(open_->mu);
    open_->open.erase(this);
  }

 public:
  // Once the io threads are gone: every connection still open is closed from here.
  static void CloseRemaining(GrpcOpenConnections& open) {
    std::vector<std::shared_ptr<GrpcConnection>> remaining;
    {
      MutexLock lock(open.mu);
      for (auto& [raw, connection] : open.open) remaining.push_back(connection);
    }
    for (auto& connection : remaining) connection->Close();
  }

 private:
  tcp::socket socket_;
  Connection connection_;
  const std::unordered_map<std::string, GrpcMethod>& methods_;
  const GrpcServerOptions& options_;
  const std::shared_ptr<GrpcOpenConnections> open_;
  SSL* ssl_ = nullptr;  // with TLS
  nghttp2_session* session_ = nullptr;
  std::unordered_map<std::int32_t, std::shared_ptr<GrpcCall>> calls_;  // open streams
  std::size_t held_bytes_ = 0;  // the open calls' headers_ and request_ (Hold)
  Deadline handshake_;          // until the client's first SETTINGS
  Deadline write_;              // while bytes wait for the socket's room (Flush)
  std::string out_;             // bytes nghttp2 gave, from sent_ on not yet written
  std::size_t sent_ = 0;
  bool writing_ = false;      // a wait for the socket's room is pending
  bool read_paused_ = false;  // reading waits for the socket's room
  bool large_sent_ = false;   // a large message went since the last flush (ReleaseFreeMemory)

  Mutex mu_;  // what other threads hand in: the calls' answers (GrpcCall's guarded state)
  std::vector<std::shared_ptr<GrpcCall>> ready_ DROVER_GUARDED_BY(mu_);
  bool posted_ DROVER_GUARDED_BY(mu_) = false;
  bool closed_ DROVER_GUARDED_BY(mu_) = false;
};

// ---------------------------------------------------------------------------------------------
// GrpcCall

GrpcCall::GrpcCall(Key, std::shared_ptr<GrpcConnection> connection, std::int32_t stream_id,
                   const tcp::endpoint& peer)
    : connection_(std::move(connection)), stream_id_(stream_id), peer_(peer) {}

GrpcCall::~GrpcCall() = default;

const std::string& GrpcCall::method() const {
  return handler_ != nullptr ? handler_->path : method_;
}

std::string_view GrpcCall::Metadata(std::string_view name) const {
  std::string_view rest(headers_);
  while (!rest.empty()) {
    const std::size_t name_end = rest.find('\0');
    const std::size_t value_end = rest.find('\0', name_end + 1);
    if (rest.substr(0, name_end) == name) {
      return rest.substr(name_end + 1, value_end - name_end - 1);
    }
    rest.remove_prefix(value_end + 1);
  }
  return {};
}

void GrpcCall::Reply(std::string message) {
  auto shared = std::make_shared<const std::string>(std::move(message));
  MutexLock lock(connection_->mu());
  if (finish_ || done_) return;
  pending_bytes_ += shared->size() + kPrefix;
  pending_.push_back(std::move(shared));
  finish_ = Status();
  if (!std::exchange(listed_, true)) connection_->Listed(this);
}

void GrpcCall::SendHeaders(std::vector<std::pair<std::string, std::string>> metadata) {
  MutexLock lock(connection_->mu());
  if (finish_ || done_) return;
  headers_asked_ = std::move(metadata);
  if (!std::exchange(listed_, true)) connection_->Listed(this);
}

void GrpcCall::Notify() {
  MutexLock lock(connection_->mu());
  if (done_ || wake_) return;
  wake_ = true;
  if (!std::exchange(listed_, true)) connection_->Listed(this);
}

void GrpcCall::Write(std::shared_ptr<const std::string> message) {
  MutexLock lock(connection_->mu());
  if (finish_ || done_) return;
  pending_bytes_ += message->size() + kPrefix;
  pending_.push_back(std::move(message));
  if (!std::exchange(listed_, true)) connection_->Listed(this);
}

void GrpcCall::Finish(const Status& status) {
  MutexLock lock(connection_->mu());
  if (finish_ || done_) return;
  finish_ = status;
  if (!std::exchange(listed_, true)) connection_->Listed(this);
}

std::size_t GrpcCall::backlog_bytes() const {
  MutexLock lock(connection_->mu());
  return pending_bytes_ + out_bytes_;
}

std::size_t GrpcCall::queued() const {
  MutexLock lock(connection_->mu());
  return pending_.size();
}

// ---------------------------------------------------------------------------------------------
// GrpcServer

struct GrpcServer::Impl {
  GrpcServerOptions options;
  std::unordered_map<std::string, GrpcMethod> methods;
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::unique_ptr<TcpListener> listener;
  std::shared_ptr<GrpcOpenConnections> open = std::make_shared<GrpcOpenConnections>();
  std::optional<asio::ssl::context> tls;
  std::once_flag stop_once;
};

Result<std::unique_ptr<GrpcServer>> GrpcServer::Start(GrpcServerOptions options,
                                                      std::vector<GrpcMethod> methods) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  for (GrpcMethod& m : methods) {
    std::string path = m.path;
    impl->methods.emplace(std::move(path), std::move(m));
  }
  if (!impl->options.tls_cert_file.empty() || !impl->options.tls_key_file.empty()) {
    DROVER_RETURN_IF_ERROR(LoadServerTls(impl->tls.emplace(asio::ssl::context::tls_server),
                                         impl->options.tls_cert_file, impl->options.tls_key_file));
    RequireAlpnH2(*impl->tls);
  }
  int threads = impl->options.threads;
  if (threads <= 0) {
    threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  }
  std::vector<asio::io_context*> workers;
  for (int i = 0; i < threads; ++i) {
    impl->contexts.push_back(std::make_unique<asio::io_context>(1));
    impl->work.push_back(asio::make_work_guard(*impl->contexts.back()));
    workers.push_back(impl->contexts.back().get());
  }
  ListenerOptions listen;
  listen.name = impl->options.name;
  listen.address = impl->options.address;
  listen.max_connections = impl->options.max_connections;
  listen.keep_alive = true;
  Impl* raw = impl.get();
  DROVER_ASSIGN_OR_RETURN(
      impl->listener,
      TcpListener::Start(workers, std::move(listen), [raw](tcp::socket socket, Connection c) {
        auto connection = std::make_shared<GrpcConnection>(std::move(socket), std::move(c),
                                                           raw->methods, raw->options, raw->open,
                                                           raw->tls ? &*raw->tls : nullptr);
        connection->Start();
      }));
  for (auto& context : impl->contexts) {
    impl->threads.emplace_back([context = context.get(), name = impl->options.name] {
      NameThisThread(name);
      context->run();
    });
  }
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcServer::~GrpcServer() { Stop(std::chrono::milliseconds(0)); }

std::uint16_t GrpcServer::port() const { return impl_->listener->port(); }

const ConnectionCounters& GrpcServer::counters() const { return impl_->listener->counters(); }

void GrpcServer::Stop(std::chrono::milliseconds drain) {
  std::call_once(impl_->stop_once, [this, drain] {
    // Each connection is sent a GOAWAY and closes once its calls end; what is still open after
    // `drain` is closed, its calls cancelled.
    impl_->listener->StopAccepting();
    const auto wait = [this](std::chrono::milliseconds limit) {
      const auto until = std::chrono::steady_clock::now() + limit;
      while (impl_->open->size() > 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    };
    wait(drain);
    impl_->listener->CloseAll();
    wait(std::chrono::milliseconds(500));
    for (auto& guard : impl_->work) guard.reset();
    for (auto& context : impl_->contexts) context->stop();
    for (std::thread& t : impl_->threads) t.join();
    GrpcConnection::CloseRemaining(*impl_->open);
  });
}

}  // namespace drover::net
