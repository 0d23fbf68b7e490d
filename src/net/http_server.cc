#include "net/http_server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/host_port.h"
#include "common/http_error.h"
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
  StreamWriter(Stream& stream, std::function<void(unsigned)> count)
      : stream_(stream), count_(std::move(count)) {}

  asio::any_io_executor executor() override { return stream_.get_executor(); }

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
    beast::get_lowest_layer(stream_).expires_after(timeout);
    const auto chunk = http::make_chunk(asio::buffer(data.data(), data.size()));
    error_code ec;
    co_await asio::async_write(stream_, chunk, asio::redirect_error(asio::use_awaitable, ec));
    beast::get_lowest_layer(stream_).expires_never();
    co_return !ec;
  }

  asio::awaitable<void> End() override {
    const auto last = http::make_chunk_last();
    error_code ec;
    co_await asio::async_write(stream_, last, asio::redirect_error(asio::use_awaitable, ec));
  }

 private:
  Stream& stream_;
  const std::function<void(unsigned)> count_;
};

}  // namespace

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
  // `connection` is open for as long as the session runs.
  asio::awaitable<void> Session(tcp::socket socket, Connection connection);
  template <typename Stream>
  asio::awaitable<void> Serve(Stream& stream, const std::string& client);
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
  if (!tls) {
    beast::tcp_stream stream(std::move(socket));
    co_await Serve(stream, client);
    error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    co_return;
  }
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
  while (true) {
    std::optional<HttpRequest> req = co_await Read(stream, buffer);
    if (!req) break;
    HttpReply reply = Answer(*req, client);
    if (reply.stream) {
      StreamWriter<Stream> writer(stream, [this](unsigned status) { Count(status); });
      co_await reply.stream(writer);
      break;
    }
    if (!req->keep_alive()) reply.response.keep_alive(false);
    if (!co_await Write(stream, reply.response)) break;
  }
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
  // Each connection gets its own strand: its coroutine and the wake-ups of a stream it serves
  // never run concurrently.
  DROVER_ASSIGN_OR_RETURN(impl->listener,
                          TcpListener::Start(
                              raw->io, std::move(lo), [raw] { return asio::make_strand(raw->io); },
                              TcpListener::Spawn([raw](tcp::socket socket, Connection connection) {
                                return raw->Session(std::move(socket), std::move(connection));
                              })));
  for (int i = 0; i < std::max(1, raw->options.threads); ++i) {
    impl->threads.emplace_back([raw] { raw->io.run(); });
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
    impl_->io.stop();
    for (std::thread& t : impl_->threads) t.join();
  });
}

}  // namespace drover::net
