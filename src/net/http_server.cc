#include "net/http_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "common/host_port.h"
#include "common/http_error.h"
#include "common/thread_name.h"
#include "drover/mutex.h"

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

template <typename Stream>
class StreamWriter final : public ChunkedWriter {
 public:
  StreamWriter(Stream& stream, std::shared_ptr<StreamWakeup::Queue> wakeups,
               std::function<void(unsigned)> count)
      : stream_(stream), wakeups_(std::move(wakeups)), count_(std::move(count)) {}

  std::shared_ptr<StreamWakeup> NewWakeup() override {
    return std::make_shared<StreamWakeup>(stream_.get_executor(), wakeups_);
  }

  asio::awaitable<bool> Begin(HttpHead& head) override {
    head.chunked(true);
    count_(head.result_int());
    http::response_serializer<http::empty_body> serializer{head};
    beast::get_lowest_layer(stream_).expires_never();
    error_code ec;
    co_await http::async_write_header(stream_, serializer,
                                      asio::redirect_error(asio::use_awaitable, ec));
    co_return !ec;
  }

  asio::awaitable<bool> Write(std::string_view data, Duration timeout) override {
    char size_line[20];
    const int size_len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
    const std::array<asio::const_buffer, 3> chunk{
        asio::buffer(size_line, static_cast<std::size_t>(size_len)), asio::buffer(data),
        asio::buffer("\r\n", 2)};
    beast::buffers_suffix<std::array<asio::const_buffer, 3>> rest(chunk);
    error_code ec;
    if constexpr (kPlainTcp) {
      // Almost always the socket has room for a chunk: send it now, with no timer armed and no
      // suspension (an event fanned out to a thousand streams is a thousand of these). The
      // socket must not block: a full one answers would_block, and the rest waits below.
      if (!non_blocking_) {
        stream_.socket().non_blocking(true, ec);
        if (ec) co_return false;
        non_blocking_ = true;
      }
      const std::size_t sent = stream_.socket().write_some(chunk, ec);
      if (!ec && sent == asio::buffer_size(chunk)) co_return true;
      if (ec && ec != asio::error::would_block && ec != asio::error::interrupted) co_return false;
      rest.consume(ec ? 0 : sent);
      ec = {};
    }
    // The client is slow to read: the rest within the timeout.
    beast::get_lowest_layer(stream_).expires_after(timeout);
    co_await asio::async_write(stream_, rest, asio::redirect_error(asio::use_awaitable, ec));
    beast::get_lowest_layer(stream_).expires_never();
    co_return !ec;
  }

  asio::awaitable<void> End() override {
    const auto last = http::make_chunk_last();
    error_code ec;
    co_await asio::async_write(stream_, last, asio::redirect_error(asio::use_awaitable, ec));
  }

 private:
  static constexpr bool kPlainTcp = std::is_same_v<Stream, beast::tcp_stream>;
  bool non_blocking_ = false;  // the socket's user non-blocking mode is set (plain TCP only)

  Stream& stream_;
  const std::shared_ptr<StreamWakeup::Queue> wakeups_;
  const std::function<void(unsigned)> count_;
};

}  // namespace

// Allocated once per wake-up: waiting and waking allocate nothing.
struct StreamWakeup::Resume {
  std::optional<asio::detail::awaitable_handler<asio::any_io_executor>> handler;
};

// The streams notified and not yet woken, as a lock-free list (the producer that notifies a
// thousand streams per event never waits for an io thread): the stream that finds the list empty
// posts a drain. The drain takes the whole list, hands a share of it to each other io thread, and
// wakes each stream by dispatching to its strand, which an io thread enters at once when the
// stream is waiting (it usually is): no post per stream.
//
// It also knows every wake-up of its server, for the end: a coroutine parked in Wait() is owned
// by its wake-up (the handler that would resume it), not by the io_context, so once the io
// threads are gone Release() drops those handlers, which hands each coroutine's unwinding to the
// io_context, whose destruction then frees it (its socket, its watcher).
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

  void Track(StreamWakeup* w) {
    MutexLock lock(mu_);
    live_.insert(w);
  }
  void Untrack(StreamWakeup* w) {
    MutexLock lock(mu_);
    live_.erase(w);
  }

  // After the io threads have stopped (nothing runs on a strand any more): drops the handler of
  // every coroutine still waiting.
  void Release() {
    std::vector<asio::detail::awaitable_handler<asio::any_io_executor>> parked;
    {
      MutexLock lock(mu_);
      for (StreamWakeup* w : live_) {
        if (w->resume_->handler) {
          parked.push_back(std::move(*w->resume_->handler));
          w->resume_->handler.reset();
        }
      }
    }
    // Destroyed here, outside the lock: each posts its coroutine's unwinding to the io_context.
  }

 private:
  // A share smaller than this is not worth another thread's wake-up.
  static constexpr std::size_t kShare = 64;

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
    for (std::shared_ptr<StreamWakeup>& stream : streams) {
      const asio::any_io_executor strand = stream->strand_;
      asio::dispatch(strand, [stream = std::move(stream)] { stream->Fire(); });
    }
  }

  asio::io_context& io_;
  const int lanes_;
  // Sequentially consistent, with stopped_: an Add that races with Stop() sees that it stopped,
  // or Stop()'s Clear() sees what it added.
  std::atomic<StreamWakeup*> head_{nullptr};
  std::atomic<bool> stopped_{false};
  Mutex mu_;  // a drain is posted only under it, while not stopped
  std::unordered_set<StreamWakeup*> live_ DROVER_GUARDED_BY(mu_);
};

StreamWakeup::StreamWakeup(asio::any_io_executor strand, std::shared_ptr<Queue> queue)
    : strand_(std::move(strand)), queue_(std::move(queue)), resume_(std::make_unique<Resume>()) {
  queue_->Track(this);
}

StreamWakeup::~StreamWakeup() { queue_->Untrack(this); }

void StreamWakeup::Notify() {
  if (listed_.exchange(true, std::memory_order_acq_rel)) return;  // a wake-up is on its way
  queue_->Add(shared_from_this());
}

void StreamWakeup::Fire() {
  // Cleared before the waiter runs: whatever is produced after it looks gets a new wake-up.
  listed_.store(false, std::memory_order_release);
  woken_ = true;
  if (resume_->handler) {
    auto handler = std::move(*resume_->handler);
    resume_->handler.reset();
    std::move(handler)();  // runs the coroutine here, on its strand, to its next wait
  }
}

asio::awaitable<void> StreamWakeup::Wait() {
  if (!woken_) {
    co_await asio::async_initiate<const asio::use_awaitable_t<>, void()>(
        [this](auto handler) { resume_->handler.emplace(std::move(handler)); },
        asio::use_awaitable);
  }
  woken_ = false;
}

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
  // `connection` is open for as long as the session runs (the plain or the TLS session holds
  // it). Not a coroutine: those two are coroutines of their own, so a plain connection's frame
  // holds no room for a TLS stream (a stream may idle for days).
  asio::awaitable<void> Session(tcp::socket socket, Connection connection);
  asio::awaitable<void> PlainSession(tcp::socket socket, Connection connection, std::string client);
  asio::awaitable<void> TlsSession(tcp::socket socket, Connection connection, std::string client);
  template <typename Stream>
  asio::awaitable<void> Serve(Stream& stream, const std::string& client);
  // Reads one request and answers it; true to read the next. When the answer is a stream, it is
  // left in `run` for Serve to run once this frame (the request, the reply) is gone.
  template <typename Stream>
  asio::awaitable<bool> ServeOne(Stream& stream, beast::flat_buffer& buffer,
                                 const std::string& client,
                                 std::function<asio::awaitable<void>(ChunkedWriter&)>& run);
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

Status HttpServer::Impl::LoadTls() {
  if (options.tls_cert_file.empty() && options.tls_key_file.empty()) return Status::Ok();
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  ssl::context& ctx = tls.emplace(ssl::context::tls_server);
  // TLS 1.2 and later only.
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                  ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                  ssl::context::single_dh_use);
  error_code ec;
  ctx.use_certificate_chain_file(options.tls_cert_file, ec);
  if (ec) {
    return InvalidArgumentError("cannot load TLS certificate " + options.tls_cert_file + ": " +
                                ec.message());
  }
  ctx.use_private_key_file(options.tls_key_file, ssl::context::pem, ec);
  if (ec) {
    return InvalidArgumentError("cannot load TLS key " + options.tls_key_file + ": " +
                                ec.message());
  }
  return Status::Ok();
}

asio::awaitable<void> HttpServer::Impl::Session(tcp::socket socket, Connection connection) {
  const tcp::endpoint& remote = connection.peer();
  const std::string client = HostPort{remote.address().to_string(), remote.port(),
                                      remote.address().is_v6() ? HostKind::kIpv6 : HostKind::kIpv4}
                                 .ToString();
  if (!tls) return PlainSession(std::move(socket), std::move(connection), client);
  return TlsSession(std::move(socket), std::move(connection), client);
}

asio::awaitable<void> HttpServer::Impl::PlainSession(tcp::socket socket,
                                                     [[maybe_unused]] Connection connection,
                                                     std::string client) {
  beast::tcp_stream stream(std::move(socket));
  co_await Serve(stream, client);
  error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<void> HttpServer::Impl::TlsSession(tcp::socket socket,
                                                   [[maybe_unused]] Connection connection,
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
  co_await Serve(stream, client);
  beast::get_lowest_layer(stream).expires_after(kTlsHandshakeTimeout);
  co_await stream.async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
}

template <typename Stream>
asio::awaitable<void> HttpServer::Impl::Serve(Stream& stream, const std::string& client) {
  beast::flat_buffer buffer;
  std::function<asio::awaitable<void>(ChunkedWriter&)> run;
  while (co_await ServeOne(stream, buffer, client, run)) {
  }
  if (!run) co_return;
  // A stream may stay open for days, mostly idle: it keeps no request, no reply and no read
  // buffer (the stream has what it needs from them).
  buffer = beast::flat_buffer();
  StreamWriter<Stream> writer(stream, wakeups, [this](unsigned status) { Count(status); });
  co_await run(writer);
}

template <typename Stream>
asio::awaitable<bool> HttpServer::Impl::ServeOne(
    Stream& stream, beast::flat_buffer& buffer, const std::string& client,
    std::function<asio::awaitable<void>(ChunkedWriter&)>& run) {
  std::optional<HttpRequest> req = co_await Read(stream, buffer);
  if (!req) co_return false;
  HttpReply reply = Answer(*req, client);
  if (reply.stream) {
    run = std::move(reply.stream);
    co_return false;
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
  std::size_t body_limit = options.max_body;
  for (const auto& [prefix, limit] : options.larger_bodies)
    body_limit = std::max(body_limit, limit);
  parser.body_limit(body_limit);
  co_await http::async_read_header(stream, buffer, parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) {
    const std::string_view target(parser.get().target().data(), parser.get().target().size());
    body_limit = options.max_body;
    for (const auto& [prefix, limit] : options.larger_bodies) {
      if (target.starts_with(prefix)) body_limit = std::max(body_limit, limit);
    }
    parser.body_limit(body_limit);
    if (parser.content_length() && *parser.content_length() > body_limit) {
      ec = http::error::body_limit;
    } else {
      co_await http::async_read(stream, buffer, parser,
                                asio::redirect_error(asio::use_awaitable, ec));
    }
  }
  if (!ec) co_return parser.release();
  if (ClientLeft(ec)) co_return std::nullopt;
  // A malformed or oversized request: answer once, then close (the stream is out of sync).
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
  co_await Write(stream, res);
  co_return std::nullopt;
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
  if (res.find(http::field::server) == res.end()) res.set(http::field::server, server_header);
  if (res.result() == http::status::unauthorized &&
      res.find(http::field::www_authenticate) == res.end()) {
    res.set(http::field::www_authenticate, "Bearer realm=\"" + server_header + "\"");
  }
  Count(res.result_int());
  error_code ec;
  co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec && res.keep_alive();
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
  // Each connection gets its own strand: its coroutine and the wake-ups of a stream it serves
  // never run concurrently.
  DROVER_ASSIGN_OR_RETURN(impl->listener,
                          TcpListener::Start(
                              raw->io, std::move(lo), [raw] { return asio::make_strand(raw->io); },
                              TcpListener::Spawn([raw](tcp::socket socket, Connection connection) {
                                return raw->Session(std::move(socket), std::move(connection));
                              })));
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
