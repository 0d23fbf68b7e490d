#include "net/http_client.h"

// Boost 1.74's asio headers use std::exchange without including <utility>.
#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <limits>
#include <utility>

#include "common/host_port.h"
#include "common/text.h"

namespace drover::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

Status Unreachable(const std::string& peer, const std::string& host, const std::string& port,
                   const std::string& what) {
  return UnavailableError(peer + " at " + host + ":" + port + ": " + what);
}

// An exchange that failed after connecting. A plain-HTTP request to a TLS port is closed or reset
// before any answer, and a TLS hello to a plain port fails the handshake: both say which scheme
// to try, since the bare error ("end of stream") does not.
Status ExchangeFailed(const std::string& peer, const std::string& host, const std::string& port,
                      bool tls, const beast::error_code& ec) {
  std::string what = ec.message();
  if (!tls && (ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
               ec == asio::error::eof)) {
    what = "closed the connection without an HTTP answer (if it serves HTTPS, use https://)";
  }
  return Unreachable(peer, host, port, what);
}

// Resolves and connects `stream` to host:port within kConnectTimeout (or `timeout`, when
// shorter), then arms `timeout` for the exchange: a peer that drops SYNs is told from a slow
// answer in seconds, whatever the exchange may take (a stop waits out an instance's grace).
constexpr std::chrono::seconds kConnectTimeout{4};
Status Connect(beast::tcp_stream& stream, const std::string& peer, const std::string& host,
               const std::string& port, std::chrono::seconds timeout) {
  beast::error_code ec;
  tcp::resolver resolver(stream.get_executor());
  const auto endpoints = resolver.resolve(host, port, ec);
  if (ec) return Unreachable(peer, host, port, ec.message());
  const std::chrono::seconds connect_within = std::min(timeout, kConnectTimeout);
  stream.expires_after(connect_within);
  stream.connect(endpoints, ec);
  if (ec == beast::error::timeout) {
    return Unreachable(
        peer, host, port,
        "no answer to a connect within " + std::to_string(connect_within.count()) + " s");
  }
  if (ec) return Unreachable(peer, host, port, ec.message());
  stream.expires_after(timeout);
  return Status::Ok();
}

}  // namespace

Result<HttpClient> HttpClient::Create(const std::string& base, std::string token,
                                      std::chrono::seconds timeout, std::string ca_file,
                                      std::string peer) {
  std::vector<Server> servers;
  for (const std::string& one : SplitCommaList(base)) {
    const bool tls = one.rfind("https://", 0) == 0;
    if (!tls && one.rfind("http://", 0) != 0) {
      return InvalidArgumentError(peer + " URL must start with http:// or https:// (got '" + one +
                                  "')");
    }
    std::string rest = one.substr(tls ? 8 : 7);
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    if (rest.find('/') != std::string::npos) {
      return InvalidArgumentError(peer + " URL must be http(s)://host:port (got '" + one + "')");
    }
    DROVER_ASSIGN_OR_RETURN(const HostPort authority, ParseHostPort(rest, peer + " URL"));
    if (!ca_file.empty() && !tls) {
      return InvalidArgumentError("a CA file only applies to an https:// " + peer + " URL");
    }
    servers.push_back(Server{authority.host, std::to_string(authority.port), tls});
  }
  return HttpClient(std::move(servers), std::move(token), timeout, std::move(ca_file),
                    std::move(peer));
}

template <typename Use>
Status HttpClient::WithConnection(Use&& use) const {
  Status last;
  for (std::size_t tried = 0; tried < servers_.size(); ++tried) {
    const std::size_t index = (current_ + tried) % servers_.size();
    bool connected = false;
    last = WithConnectionTo(servers_[index], connected,
                            [&](auto& stream) { return use(stream, servers_[index]); });
    if (connected) {
      current_ = index;  // the next request starts here
      return last;
    }
  }
  return last;
}

template <typename Use>
Status HttpClient::WithConnectionTo(const Server& server, bool& connected, Use&& use) const {
  const std::string& host = server.host;
  const std::string& port = server.port;
  asio::io_context io;
  if (!server.tls) {
    beast::tcp_stream stream(io);
    DROVER_RETURN_IF_ERROR(Connect(stream, peer_, host, port, timeout_));
    connected = true;
    Status result = use(stream);
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return result;
  }
  ssl::context ctx(ssl::context::tls_client);
  beast::error_code ec;
  ctx.set_verify_mode(ssl::verify_peer);
  if (ca_file_.empty()) {
    ctx.set_default_verify_paths(ec);
  } else {
    ctx.load_verify_file(ca_file_, ec);
  }
  if (ec) return InvalidArgumentError("cannot load CA certificates: " + ec.message());
  beast::ssl_stream<beast::tcp_stream> stream(io, ctx);
  // SNI, and the certificate must name the host we asked for.
  // (SNI carries names only, not IP addresses.)
  beast::error_code not_ip;
  asio::ip::make_address(host, not_ip);
  if (not_ip && SSL_ctrl(stream.native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME,
                         TLSEXT_NAMETYPE_host_name, const_cast<char*>(host.c_str())) != 1) {
    return Unreachable(peer_, host, port, "cannot set TLS server name");
  }
  stream.set_verify_callback(ssl::host_name_verification(host));
  DROVER_RETURN_IF_ERROR(Connect(beast::get_lowest_layer(stream), peer_, host, port, timeout_));
  connected = true;  // a TLS failure would be the same on a retry: no moving on
  stream.handshake(ssl::stream_base::client, ec);
  if (ec) {
    const bool plain = ec.message().find("wrong version number") != std::string::npos ||
                       ec.message().find("packet length too long") != std::string::npos;
    return Unreachable(peer_, host, port,
                       "TLS handshake failed: " + ec.message() +
                           (plain ? " (it answers plain HTTP? use http://)" : ""));
  }
  Status result = use(stream);
  // close_notify; a server that just closes is fine too. (A stream given up early has closed the
  // socket: no waiting for a peer that is still sending.)
  if (beast::get_lowest_layer(stream).socket().is_open()) stream.shutdown(ec);
  return result;
}

Result<HttpResult> HttpClient::Send(std::string_view method, const std::string& target,
                                    const std::string& body) const {
  const http::verb verb = http::string_to_verb(beast::string_view(method.data(), method.size()));
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::user_agent, "drover-ctl");
  if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  HttpResult result;
  DROVER_RETURN_IF_ERROR(WithConnection([&](auto& stream, const Server& server) -> Status {
    req.set(http::field::host, server.host);
    beast::error_code ec;
    http::write(stream, req, ec);
    if (ec) return ExchangeFailed(peer_, server.host, server.port, server.tls, ec);
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res, ec);
    if (ec) return ExchangeFailed(peer_, server.host, server.port, server.tls, ec);
    result.status = static_cast<int>(res.result_int());
    result.body = std::move(res.body());
    return Status::Ok();
  }));
  return result;
}

Result<HttpResult> HttpClient::Stream(const std::string& target,
                                      const std::function<bool(std::string_view)>& on_line) const {
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::user_agent, "drover-ctl");
  if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
  HttpResult result;
  DROVER_RETURN_IF_ERROR(WithConnection([&](auto& stream, const Server& server) -> Status {
    const std::string& host = server.host;
    const std::string& port = server.port;
    req.set(http::field::host, host);
    beast::error_code ec;
    http::write(stream, req, ec);
    if (ec) return ExchangeFailed(peer_, host, port, server.tls, ec);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // Boost 1.74: none misreads
    http::read_header(stream, buffer, parser, ec);
    if (ec) return ExchangeFailed(peer_, host, port, server.tls, ec);
    result.status = static_cast<int>(parser.get().result_int());
    if (parser.get().result() != http::status::ok) {  // a refusal: its body says why
      http::read(stream, buffer, parser, ec);
      result.body = parser.get().body();
      return Status::Ok();
    }
    beast::get_lowest_layer(stream).expires_never();
    std::string pending;
    bool stop = false;
    // Chunk bodies arrive as they are sent; lines are handed on as soon as they are complete.
    auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code& error) {
      pending.append(data.data(), data.size());
      std::size_t nl;
      while (!stop && (nl = pending.find('\n')) != std::string::npos) {
        stop = !on_line(std::string_view(pending).substr(0, nl));
        pending.erase(0, nl + 1);
      }
      if (stop) error = asio::error::operation_aborted;
      return data.size();
    };
    parser.on_chunk_body(on_chunk);
    while (!parser.is_done() && !stop) {
      http::read_some(stream, buffer, parser, ec);
      if (ec) break;
    }
    if (stop) {
      // Given up by the caller while the server goes on sending: closed here, so that a TLS
      // close_notify does not wait for the server to stop.
      beast::error_code ignored;
      beast::get_lowest_layer(stream).socket().close(ignored);
      return Status::Ok();
    }
    if (!ec || ec == http::error::end_of_stream) return Status::Ok();
    return Unreachable(peer_, host, port, ec.message());  // broken after an answer: no hint
  }));
  return result;
}

}  // namespace drover::net
