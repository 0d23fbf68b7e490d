#include "http_client.h"

// Boost 1.74's asio headers use std::exchange without including <utility>.
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <utility>

namespace drover::cli {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

Status Unreachable(const std::string& host, const std::string& port, const std::string& what) {
  return UnavailableError("registry at " + host + ":" + port + ": " + what);
}

// Resolves and connects `stream` to host:port, with `timeout` armed.
Status Connect(beast::tcp_stream& stream, const std::string& host, const std::string& port,
               std::chrono::seconds timeout) {
  beast::error_code ec;
  tcp::resolver resolver(stream.get_executor());
  const auto endpoints = resolver.resolve(host, port, ec);
  if (ec) return Unreachable(host, port, ec.message());
  stream.expires_after(timeout);
  stream.connect(endpoints, ec);
  if (ec) return Unreachable(host, port, ec.message());
  return Status::Ok();
}

}  // namespace

Result<HttpClient> HttpClient::Create(const std::string& base, std::string token,
                                      std::chrono::seconds timeout) {
  constexpr std::string_view kScheme = "http://";
  if (base.rfind(kScheme, 0) != 0) {
    return InvalidArgumentError("registry URL must start with http:// (got '" + base + "')");
  }
  std::string rest = base.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size() ||
      rest.find('/') != std::string::npos) {
    return InvalidArgumentError("registry URL must be http://host:port (got '" + base + "')");
  }
  std::string host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return HttpClient(std::move(host), rest.substr(colon + 1), std::move(token), timeout);
}

Result<HttpResult> HttpClient::Send(std::string_view method, const std::string& target,
                                    const std::string& body) const {
  net::io_context io;
  beast::tcp_stream stream(io);
  DROVER_RETURN_IF_ERROR(Connect(stream, host_, port_, timeout_));
  beast::error_code ec;

  const http::verb verb = http::string_to_verb(beast::string_view(method.data(), method.size()));
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, host_);
  req.set(http::field::user_agent, "drover-ctl");
  if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req, ec);
  if (ec) return Unreachable(host_, port_, ec.message());

  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res, ec);
  if (ec) return Unreachable(host_, port_, ec.message());
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return HttpResult{static_cast<int>(res.result_int()), std::move(res.body())};
}

Status HttpClient::Stream(const std::string& target,
                          const std::function<bool(std::string_view)>& on_line) const {
  net::io_context io;
  beast::tcp_stream stream(io);
  DROVER_RETURN_IF_ERROR(Connect(stream, host_, port_, timeout_));
  beast::error_code ec;

  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, host_);
  req.set(http::field::user_agent, "drover-ctl");
  if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
  http::write(stream, req, ec);
  if (ec) return Unreachable(host_, port_, ec.message());

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  http::read_header(stream, buffer, parser, ec);
  if (ec) return Unreachable(host_, port_, ec.message());
  if (parser.get().result() != http::status::ok) {
    http::read(stream, buffer, parser, ec);
    return Status(StatusCode::kUnavailable, "registry answered " +
                                                std::to_string(parser.get().result_int()) + ": " +
                                                parser.get().body());
  }
  stream.expires_never();
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
    if (stop) error = net::error::operation_aborted;
    return data.size();
  };
  parser.on_chunk_body(on_chunk);
  while (!parser.is_done() && !stop) {
    http::read_some(stream, buffer, parser, ec);
    if (ec) break;
  }
  if (stop || !ec || ec == http::error::end_of_stream) return Status::Ok();
  return Unreachable(host_, port_, ec.message());
}

}  // namespace drover::cli
