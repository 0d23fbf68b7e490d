#include "registry/http_api.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/fencing.h"
#include "common/metrics_text.h"
#include "common/text.h"
#include "registry/auth.h"
#include "registry/client_limits.h"
#include "registry/json_codec.h"
#include "registry/registry.h"
#include "registry/ui_url.h"
#include "registry/web_assets.h"

namespace drover::registry {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

namespace {

http::status HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return http::status::ok;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return http::status::bad_request;
    case StatusCode::kNotFound:
      return http::status::not_found;
    case StatusCode::kAborted:
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return http::status::conflict;
    case StatusCode::kUnauthenticated:
      return http::status::unauthorized;
    case StatusCode::kPermissionDenied:
      return http::status::forbidden;
    case StatusCode::kResourceExhausted:
      return http::status::too_many_requests;
    case StatusCode::kUnavailable:
      return http::status::service_unavailable;
    case StatusCode::kDeadlineExceeded:
      return http::status::gateway_timeout;
    case StatusCode::kUnimplemented:
      return http::status::not_implemented;
    default:
      return http::status::internal_server_error;
  }
}

// Fencing is the one ABORTED the registry returns; clients branch on it, so it gets its name.
std::string ErrorCode(const Status& status) {
  return IsFenced(status) ? "FENCED" : std::string(StatusCodeName(status.code()));
}

Response JsonResponse(const Request& req, http::status status, const nlohmann::json& body) {
  Response res{status, req.version()};
  res.set(http::field::server, "drover-registry");
  res.set(http::field::content_type, "application/json");
  res.keep_alive(req.keep_alive());
  res.body() = DumpJson(body) + "\n";
  res.prepare_payload();
  return res;
}

Response ErrorResponse(const Request& req, const Status& status) {
  nlohmann::json error = {{"code", ErrorCode(status)}, {"message", status.message()}};
  // A fenced writer learns the generation to beat without parsing the message.
  if (const auto newest = FencedNewestGeneration(status)) error["newest_generation"] = *newest;
  Response res = JsonResponse(req, HttpStatusFor(status.code()), {{"error", std::move(error)}});
  if (status.code() == StatusCode::kUnauthenticated) {
    res.set(http::field::www_authenticate, "Bearer realm=\"drover-registry\"");
  }
  return res;
}

std::string_view AuthorizationHeader(const Request& req) {
  const auto value = req[http::field::authorization];
  return std::string_view(value.data(), value.size());
}

Response ErrorResponse(const Request& req, http::status http_status, StatusCode code,
                       std::string message) {
  Response res = ErrorResponse(req, Status(code, std::move(message)));
  res.result(http_status);
  return res;
}

std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> parts;
  std::size_t start = 1;  // skip the leading '/'
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

Result<std::uint64_t> ParseUint(std::string_view text, const char* what) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgumentError(std::string(what) + " must be a non-negative integer");
  }
  return value;
}

nlohmann::json RevisionBody(std::uint64_t revision) { return {{"revision", revision}}; }

std::string_view ContentTypeOf(std::string_view name) {
  const std::size_t dot = name.rfind('.');
  const std::string_view ext = dot == std::string_view::npos ? "" : name.substr(dot + 1);
  if (ext == "html") return "text/html; charset=utf-8";
  if (ext == "js") return "text/javascript; charset=utf-8";
  if (ext == "css") return "text/css; charset=utf-8";
  if (ext == "json") return "application/json";
  if (ext == "svg") return "image/svg+xml";
  if (ext == "png") return "image/png";
  if (ext == "ico") return "image/x-icon";
  return "application/octet-stream";
}

// The page loads only its own files and may fetch from anywhere: gateways and agents are other
// origins, listed in /ui/config.json.
constexpr const char* kUiContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src *; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// Beast 1.74 takes boost::string_view.
beast::string_view View(std::string_view s) { return {s.data(), s.size()}; }

Response Redirect(const Request& req, std::string_view location) {
  Response res{http::status::found, req.version()};
  res.set(http::field::server, "drover-registry");
  res.set(http::field::location, View(location));
  res.set(http::field::cache_control, "no-cache");
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.keep_alive(req.keep_alive());
  res.body() = "see " + std::string(location) + "\n";
  res.prepare_payload();
  return res;
}

// HEAD gets GET's headers, Content-Length included, and no body.
void FinishBody(const Request& req, Response& res) {
  if (req.method() == http::verb::head) {
    res.content_length(res.body().size());
    res.body().clear();
  } else {
    res.prepare_payload();
  }
}

constexpr std::chrono::seconds kWatchWriteTimeout{30};
constexpr std::chrono::milliseconds kAcceptBackoff{200};
constexpr std::chrono::seconds kStopGrace{2};
constexpr std::chrono::seconds kTlsHandshakeTimeout{10};
constexpr std::size_t kEncodedEvents = 4096;

}  // namespace

struct HttpServer::Impl {
  Impl(Registry& r, HttpOptions o) : registry(r), options(WithLimits(std::move(o))) {}

  static HttpOptions WithLimits(HttpOptions o) {
    if (!o.limits) o.limits = std::make_shared<ClientLimits>();
    return o;
  }

  net::awaitable<void> Accept();
  net::awaitable<void> Session(tcp::socket socket);
  // Over max_connections: one 503 and close, without reading the request.
  net::awaitable<void> Refuse(tcp::socket socket);
  template <typename Stream>
  net::awaitable<void> Serve(Stream& stream, const std::string& client);
  template <typename Stream>
  net::awaitable<void> ServeWatch(Stream& stream, const Request& req, std::uint64_t from,
                                  std::string service, std::string client);
  Response Handle(const Request& req);
  // OK when auth is off or the request carries a known token.
  Status Authenticate(const Request& req) const {
    if (!options.auth) return Status::Ok();
    return options.auth->Authenticate(AuthorizationHeader(req)).status();
  }
  Response HandleInstance(const Request& req, std::string_view service, std::string_view id,
                          std::string_view action, std::string_view query);
  // `name` is the path after "/ui/".
  Response HandleUi(const Request& req, std::string_view name);
  std::string Metrics();
  void Count(unsigned status) {
    std::lock_guard lock(mu);
    ++responses[status];
  }

  // A PUT or DELETE goes to every watcher of its service: encode it once. Holding the EventPtr
  // keeps the address from being reused while it is a key.
  std::shared_ptr<const std::string> Encoded(const EventPtr& e) {
    if (e->type != EventType::kPut && e->type != EventType::kDelete) {
      return std::make_shared<const std::string>(DumpJson(EventToJson(*e)) + "\n");
    }
    {
      std::lock_guard lock(encoded_mu);
      if (auto it = encoded.find(e.get()); it != encoded.end()) return it->second.second;
    }
    auto line = std::make_shared<const std::string>(DumpJson(EventToJson(*e)) + "\n");
    std::lock_guard lock(encoded_mu);
    if (encoded.emplace(e.get(), std::make_pair(e, line)).second) {
      encoded_order.push_back(e.get());
      if (encoded_order.size() > kEncodedEvents) {
        encoded.erase(encoded_order.front());
        encoded_order.pop_front();
      }
    }
    return line;
  }

  Registry& registry;
  const HttpOptions options;
  std::optional<ssl::context> tls;  // set when serving HTTPS
  net::io_context io{std::max(1, options.threads)};
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  std::once_flag stop_once;

  std::mutex mu;
  std::atomic<std::size_t> open_connections{0};
  std::atomic<std::uint64_t> rejected_connections{0};
  std::condition_variable watches_done;         // a watch stream ended
  std::set<std::shared_ptr<Watcher>> watches;   // guarded by mu: live watch streams
  std::map<unsigned, std::uint64_t> responses;  // guarded by mu: by HTTP status

  std::mutex encoded_mu;
  std::unordered_map<const Event*, std::pair<EventPtr, std::shared_ptr<const std::string>>>
      encoded;                             // guarded by encoded_mu
  std::deque<const Event*> encoded_order;  // guarded by encoded_mu: oldest first
};

net::awaitable<void> HttpServer::Impl::Accept() {
  for (;;) {
    boost::system::error_code ec;
    // Each connection gets its own strand: its coroutine and the watch wake-ups it receives
    // never run concurrently.
    tcp::socket socket = co_await acceptor.async_accept(
        net::make_strand(io), net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      // Out of descriptors or memory: retrying at once would spin. Back off and let
      // connections close.
      spdlog::warn("registry http: accept failed ({}); retrying in {} ms", ec.message(),
                   kAcceptBackoff.count());
      net::steady_timer backoff(acceptor.get_executor(), kAcceptBackoff);
      co_await backoff.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    const auto executor = socket.get_executor();
    if (open_connections.load() >= options.max_connections) {
      rejected_connections.fetch_add(1);
      net::co_spawn(executor, Refuse(std::move(socket)), net::detached);
      continue;
    }
    open_connections.fetch_add(1);
    net::co_spawn(executor, Session(std::move(socket)), net::detached);
  }
}

net::awaitable<void> HttpServer::Impl::Refuse(tcp::socket socket) {
  static const std::string kBusy = [] {
    const std::string body = R"({"error":{"code":"RESOURCE_EXHAUSTED","message":"too many )"
                             R"(connections to this registry; retry shortly"}})"
                             "\n";
    return "HTTP/1.1 503 Service Unavailable\r\nServer: drover-registry\r\n"
           "Content-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  boost::system::error_code ec;
  if (!tls) {
    // Best effort and bounded: a client that never reads gets a closed socket.
    net::steady_timer limit(socket.get_executor(), std::chrono::seconds(1));
    limit.async_wait([&socket](boost::system::error_code timer_ec) {
      if (!timer_ec) socket.close(timer_ec);
    });
    co_await net::async_write(socket, net::buffer(kBusy),
                              net::redirect_error(net::use_awaitable, ec));
    limit.cancel();
    socket.shutdown(tcp::socket::shutdown_send, ec);
  }
  // Over TLS a handshake per refused connection would cost what the limit protects: close.
  socket.close(ec);
}

net::awaitable<void> HttpServer::Impl::Session(tcp::socket socket) {
  struct Open {
    std::atomic<std::size_t>& count;
    ~Open() { count.fetch_sub(1); }
  } open{open_connections};
  boost::system::error_code address_ec;
  const std::string client = socket.remote_endpoint(address_ec).address().to_string();
  if (!tls) {
    beast::tcp_stream stream(std::move(socket));
    co_await Serve(stream, client);
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    co_return;
  }
  TlsStream stream(std::move(socket), *tls);
  boost::system::error_code ec;
  beast::get_lowest_layer(stream).expires_after(kTlsHandshakeTimeout);
  co_await stream.async_handshake(ssl::stream_base::server,
                                  net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    // Plain HTTP to the TLS port, a client that does not trust the certificate, a scanner: the
    // client learns it from its own TLS error; the log says who.
    spdlog::debug("registry https: handshake failed: {}", ec.message());
    co_return;
  }
  co_await Serve(stream, client);
  beast::get_lowest_layer(stream).expires_after(kTlsHandshakeTimeout);
  co_await stream.async_shutdown(net::redirect_error(net::use_awaitable, ec));
}

template <typename Stream>
net::awaitable<void> HttpServer::Impl::Serve(Stream& stream, const std::string& client) {
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(options.max_body);
    parser.header_limit(16 * 1024);
    beast::get_lowest_layer(stream).expires_after(options.idle_timeout);
    boost::system::error_code ec;
    co_await http::async_read(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      break;
    }
    if (ec) {
      // A malformed or oversized request: answer once, then close (the stream is out of sync).
      Request bad;
      bad.version(11);
      Response res =
          ec == http::error::body_limit
              ? ErrorResponse(bad, http::status::payload_too_large, StatusCode::kResourceExhausted,
                              "body larger than " + std::to_string(options.max_body) + " bytes")
              : ErrorResponse(bad, http::status::bad_request, StatusCode::kInvalidArgument,
                              "malformed HTTP request: " + ec.message());
      res.keep_alive(false);
      Count(res.result_int());
      co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
      break;
    }
    Request req = parser.release();
    const std::string_view target(req.target().data(), req.target().size());
    if (req.method() == http::verb::get && target.rfind("/v1/watch", 0) == 0 &&
        (target.size() == 9 || target[9] == '?')) {
      const auto query = ParseQuery(target.size() > 10 ? target.substr(10) : std::string_view());
      std::uint64_t from = 0;
      if (auto it = query.find("from"); it != query.end()) {
        auto parsed = ParseUint(it->second, "from");
        if (!parsed.ok()) {
          Response res = ErrorResponse(req, parsed.status());
          Count(res.result_int());
          co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
          if (ec || !req.keep_alive()) break;
          continue;
        }
        from = *parsed;
      }
      if (Status auth = Authenticate(req); !auth.ok()) {
        Response res = ErrorResponse(req, auth);
        Count(res.result_int());
        co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
        break;
      }
      // Named, not a temporary: GCC 12 miscompiles some temporaries inside co_await operands.
      std::string service;
      if (auto it = query.find("service"); it != query.end()) service = it->second;
      co_await ServeWatch(stream, req, from, std::move(service), client);
      break;
    }
    Response res;
    const bool write = req.method() == http::verb::put || req.method() == http::verb::post ||
                       req.method() == http::verb::delete_;
    Status limited;
    if (write && target.rfind("/v1/", 0) == 0) limited = options.limits->TakeWriteToken(client);
    if (!limited.ok()) {
      res = ErrorResponse(req, http::status::too_many_requests, limited.code(), limited.message());
      res.set(http::field::retry_after, "1");
      Count(res.result_int());
      co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
      if (ec || !res.keep_alive()) break;
      continue;
    }
    try {
      res = Handle(req);
    } catch (const std::exception& e) {
      // Handlers return statuses; reaching here is a bug, and the client still gets an answer.
      spdlog::error("registry http: {} {} failed: {}", std::string(req.method_string()),
                    std::string(req.target()), e.what());
      res = ErrorResponse(req, InternalError("internal error"));
    }
    Count(res.result_int());
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
}

template <typename Stream>
net::awaitable<void> HttpServer::Impl::ServeWatch(Stream& stream, const Request& req,
                                                  std::uint64_t from, std::string service,
                                                  std::string client) {
  boost::system::error_code ec;
  if (Status admitted = options.limits->AcquireWatch(client); !admitted.ok()) {
    Response res =
        ErrorResponse(req, http::status::too_many_requests, admitted.code(), admitted.message());
    res.keep_alive(false);
    Count(res.result_int());
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    co_return;
  }
  struct Admitted {
    ClientLimits& limits;
    const std::string& client;
    ~Admitted() { limits.ReleaseWatch(client); }
  } admitted_guard{*options.limits, client};
  auto watcher = registry.Watch(from, service);
  if (!watcher.ok()) {
    Response res = ErrorResponse(req, watcher.status());
    Count(res.result_int());
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    co_return;
  }
  std::shared_ptr<Watcher> w = *watcher;
  {
    std::lock_guard lock(mu);
    watches.insert(w);
  }
  // The listener runs under the registry's lock: it only posts a wake-up to this strand.
  auto wake = std::make_shared<net::steady_timer>(stream.get_executor());
  wake->expires_at(net::steady_timer::time_point::max());
  w->SetListener([wake, executor = stream.get_executor()] {
    net::post(executor, [wake] { wake->cancel(); });
  });

  http::response<http::empty_body> header{http::status::ok, req.version()};
  header.set(http::field::server, "drover-registry");
  header.set(http::field::content_type, "application/x-ndjson");
  header.set(http::field::cache_control, "no-cache");
  header.chunked(true);
  Count(200);
  http::response_serializer<http::empty_body> serializer{header};
  beast::get_lowest_layer(stream).expires_never();
  co_await http::async_write_header(stream, serializer,
                                    net::redirect_error(net::use_awaitable, ec));
  while (!ec) {
    auto batch = w->NextShared(std::chrono::milliseconds(0));
    if (!batch.ok()) {
      // Cancelled: the server is stopping. End the response properly so the client sees a
      // clean end of stream and reconnects.
      const auto last = http::make_chunk_last();
      co_await net::async_write(stream, last, net::redirect_error(net::use_awaitable, ec));
      break;
    }
    if (batch->empty()) {
      // Woken by the listener (operation_aborted) when events are queued. Both run on this
      // connection's strand, so a wake-up cannot slip in between Next() and this wait.
      co_await wake->async_wait(net::redirect_error(net::use_awaitable, ec));
      if (ec == net::error::operation_aborted) ec = {};
      wake->expires_at(net::steady_timer::time_point::max());
      continue;
    }
    std::string lines;
    for (const EventPtr& e : *batch) lines += *Encoded(e);
    // A client that stops reading is cut off instead of pinning its backlog forever; it
    // resumes from the last revision it saw.
    beast::get_lowest_layer(stream).expires_after(kWatchWriteTimeout);
    const auto chunk = http::make_chunk(net::buffer(lines));
    co_await net::async_write(stream, chunk, net::redirect_error(net::use_awaitable, ec));
    beast::get_lowest_layer(stream).expires_never();
  }
  w->Cancel();
  std::lock_guard lock(mu);
  watches.erase(w);
  watches_done.notify_all();
}

Response HttpServer::Impl::Handle(const Request& req) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  const auto parts = SplitPath(path);
  const auto method = req.method();
  auto only = [&](http::verb allowed) {
    return method == allowed
               ? std::optional<Response>()
               : ErrorResponse(req, http::status::method_not_allowed, StatusCode::kInvalidArgument,
                               std::string("use ") + std::string(http::to_string(allowed)) +
                                   " on " + std::string(path));
  };

  if (path == "/live") {
    if (auto r = only(http::verb::get)) return *r;
    return JsonResponse(req, http::status::ok, {{"status", "alive"}});
  }
  if (path == "/ready") {
    if (auto r = only(http::verb::get)) return *r;
    return JsonResponse(req, http::status::ok,
                        {{"status", "ready"}, {"revision", registry.revision()}});
  }
  if ((path == "/" || path == "/ui") && (method == http::verb::get || method == http::verb::head)) {
    return Redirect(req, q == std::string_view::npos ? "/ui/" : "/ui/?" + std::string(query));
  }
  if (path.rfind("/ui/", 0) == 0) return HandleUi(req, path.substr(4));
  if (path == "/metrics") {
    if (auto r = only(http::verb::get)) return *r;
    Response res{http::status::ok, req.version()};
    res.set(http::field::content_type, "text/plain; version=0.0.4");
    res.keep_alive(req.keep_alive());
    res.body() = Metrics();
    res.prepare_payload();
    return res;
  }
  if (!parts.empty() && parts[0] == "v1") {
    if (Status auth = Authenticate(req); !auth.ok()) return ErrorResponse(req, auth);
  }
  if (parts.size() >= 2 && parts[0] == "v1" && parts[1] == "services") {
    if (parts.size() == 2) {
      if (auto r = only(http::verb::get)) return *r;
      nlohmann::json services = nlohmann::json::array();
      bool degraded = false;
      for (const auto& s : registry.Services()) {
        degraded |= s.degraded;
        services.push_back({{"name", s.name},
                            {"instances", s.instances},
                            {"ready", s.ready},
                            {"degraded", s.degraded}});
      }
      return JsonResponse(req, http::status::ok,
                          {{"revision", registry.revision()},
                           {"degraded", degraded},
                           {"services", std::move(services)}});
    }
    if (parts.size() >= 4 && parts[3] == "instances") {
      const std::string_view service = parts[2];
      if (parts.size() == 4) {
        if (auto r = only(http::verb::get)) return *r;
        auto list = registry.List(std::string(service));
        if (!list.ok()) return ErrorResponse(req, list.status());
        nlohmann::json instances = nlohmann::json::array();
        for (std::size_t i = 0; i < list->instances.size(); ++i) {
          nlohmann::json in = InstanceToJson(list->instances[i]);
          // Not in watch events: a renewal changes no revision, so only a read can show it.
          in["lease_remaining_ms"] =
              std::chrono::duration_cast<std::chrono::milliseconds>(list->lease_remaining[i])
                  .count();
          instances.push_back(std::move(in));
        }
        return JsonResponse(req, http::status::ok,
                            {{"revision", list->revision},
                             {"degraded", list->degraded},
                             {"instances", std::move(instances)}});
      }
      if (parts.size() <= 6) {
        return HandleInstance(req, service, parts[4], parts.size() == 6 ? parts[5] : "", query);
      }
    }
  }
  return ErrorResponse(req, http::status::not_found, StatusCode::kNotFound,
                       "no such endpoint: " + std::string(path));
}

Response HttpServer::Impl::HandleUi(const Request& req, std::string_view name) {
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    Response res = ErrorResponse(req, http::status::method_not_allowed,
                                 StatusCode::kInvalidArgument, "use GET or HEAD on /ui/");
    res.set(http::field::allow, "GET, HEAD");
    return res;
  }
  Response res{http::status::ok, req.version()};
  res.set(http::field::server, "drover-registry");
  res.set("X-Content-Type-Options", "nosniff");
  res.keep_alive(req.keep_alive());
  if (name == "config.json") {
    // Where the fleet's gateways and agents are is the deployment's business: behind the same
    // token as /v1.
    if (Status auth = Authenticate(req); !auth.ok()) return ErrorResponse(req, auth);
    res.set(http::field::content_type, "application/json");
    res.set(http::field::cache_control, "no-store");
    res.body() =
        DumpJson({{"gateways", options.ui_gateways}, {"agents", options.ui_agents}}) + "\n";
    FinishBody(req, res);
    return res;
  }
  if (name.empty()) name = "index.html";
  const auto assets = WebAssets();
  const auto asset =
      std::find_if(assets.begin(), assets.end(), [&](const WebAsset& a) { return a.name == name; });
  if (asset == assets.end()) {
    return ErrorResponse(req, http::status::not_found, StatusCode::kNotFound,
                         "no such file: /ui/" + std::string(name));
  }
  res.set(http::field::content_type, View(ContentTypeOf(asset->name)));
  // Revalidated on every load (a 304 while unchanged), so a new build never meets a page mixing
  // old and new files.
  res.set(http::field::cache_control, "no-cache");
  res.set(http::field::etag, View(asset->etag));
  if (asset->name.ends_with(".html")) {
    res.set("Content-Security-Policy", kUiContentSecurityPolicy);
    res.set("Referrer-Policy", "no-referrer");
  }
  const auto if_none_match = req[http::field::if_none_match];
  if (std::string_view(if_none_match.data(), if_none_match.size()) == asset->etag) {
    res.result(http::status::not_modified);
    return res;
  }
  res.body() = std::string(asset->body);
  FinishBody(req, res);
  return res;
}

Response HttpServer::Impl::HandleInstance(const Request& req, std::string_view service_view,
                                          std::string_view id_view, std::string_view action,
                                          std::string_view query) {
  const std::string service(service_view), id(id_view);
  const auto method = req.method();
  auto reply = [&](const Result<std::uint64_t>& rev) {
    return rev.ok() ? JsonResponse(req, http::status::ok, RevisionBody(*rev))
                    : ErrorResponse(req, rev.status());
  };
  auto not_allowed = [&] {
    return ErrorResponse(req, http::status::method_not_allowed, StatusCode::kInvalidArgument,
                         "method not allowed here");
  };
  // Every instance endpoint writes.
  if (options.auth) {
    if (Status s = options.auth->AuthorizeWrite(AuthorizationHeader(req), service); !s.ok()) {
      return ErrorResponse(req, s);
    }
  }
  if (action.empty()) {
    if (method == http::verb::put) {
      auto spec = SpecFromJson(req.body());
      if (!spec.ok()) return ErrorResponse(req, spec.status());
      return reply(registry.Register(service, id, *spec));
    }
    if (method == http::verb::delete_) {
      auto params = ParseQuery(query);
      auto it = params.find("generation");
      if (it == params.end()) {
        return ErrorResponse(req, InvalidArgumentError("missing query parameter 'generation'"));
      }
      auto generation = ParseUint(it->second, "generation");
      if (!generation.ok()) return ErrorResponse(req, generation.status());
      return reply(registry.Deregister(service, id, *generation));
    }
    return not_allowed();
  }
  if (method != http::verb::post) return not_allowed();
  if (action == "heartbeat") {
    auto body = ParseObject(req.body(), {"generation"});
    if (!body.ok()) return ErrorResponse(req, body.status());
    auto generation = GetUint(*body, "generation", true);
    if (!generation.ok()) return ErrorResponse(req, generation.status());
    return reply(registry.Heartbeat(service, id, *generation));
  }
  if (action == "state") {
    auto body = ParseObject(req.body(), {"generation", "state", "accepting"});
    if (!body.ok()) return ErrorResponse(req, body.status());
    auto generation = GetUint(*body, "generation", true);
    if (!generation.ok()) return ErrorResponse(req, generation.status());
    std::optional<InstanceState> state;
    if (body->contains("state")) {
      auto name = GetString(*body, "state", true);
      if (!name.ok()) return ErrorResponse(req, name.status());
      auto parsed = ParseInstanceState(*name);
      if (!parsed.ok()) return ErrorResponse(req, parsed.status());
      state = *parsed;
    }
    std::optional<bool> accepting;
    if (body->contains("accepting")) {
      auto value = GetBool(*body, "accepting", true);
      if (!value.ok()) return ErrorResponse(req, value.status());
      accepting = *value;
    }
    if (!state && !accepting) {
      return ErrorResponse(req, InvalidArgumentError("give 'state' and/or 'accepting'"));
    }
    return reply(registry.SetState(service, id, *generation, state, accepting));
  }
  return ErrorResponse(req, http::status::not_found, StatusCode::kNotFound,
                       "no such action: " + std::string(action));
}

std::string HttpServer::Impl::Metrics() {
  metrics::TextWriter out;
  out.Gauge("drover_registry_revision", "Current global revision",
            static_cast<double>(registry.revision()));
  out.Gauge("drover_registry_expirer",
            "1 when this process expires leases (always with SQLite; the elected one with etcd)",
            registry.expirer() ? 1 : 0);
  for (const auto& s : registry.Services()) {
    out.Gauge("drover_registry_instances", "Registered instances per service",
              static_cast<double>(s.instances), {{"service", s.name}});
    out.Gauge("drover_registry_ready_instances", "READY instances per service",
              static_cast<double>(s.ready), {{"service", s.name}});
    out.Gauge("drover_registry_degraded", "1 while a service is in self-preservation",
              s.degraded ? 1 : 0, {{"service", s.name}});
  }
  out.Gauge("drover_registry_http_connections", "Open HTTP connections",
            static_cast<double>(open_connections.load()));
  out.Counter("drover_registry_http_refused_connections_total",
              "Connections answered 503 for being over max_connections",
              static_cast<double>(rejected_connections.load()));
  std::lock_guard lock(mu);
  out.Gauge("drover_registry_watch_streams", "Open HTTP watch streams",
            static_cast<double>(watches.size()));
  out.Counter("drover_registry_refused_watches_total",
              "Watch streams (HTTP and gRPC) refused for being over max_watches_per_client",
              static_cast<double>(options.limits->refused_watches()));
  out.Counter("drover_registry_rate_limited_writes_total",
              "Writes (HTTP and gRPC) refused for being over the client's write rate",
              static_cast<double>(options.limits->rate_limited_writes()));
  for (const auto& [status, count] : responses) {
    out.Counter("drover_registry_http_responses_total", "HTTP responses by status",
                static_cast<double>(count), {{"code", std::to_string(status)}});
  }
  return out.Take();
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(Registry& registry, HttpOptions options) {
  for (auto* urls : {&options.ui_gateways, &options.ui_agents}) {
    for (std::string& url : *urls) {
      DROVER_RETURN_IF_ERROR(ValidateUiUrl(url));
      if (url.back() == '/') url.pop_back();  // the page appends paths
    }
  }
  auto impl = std::make_unique<Impl>(registry, std::move(options));
  boost::system::error_code ec;
  if (!impl->options.tls_cert_file.empty() || !impl->options.tls_key_file.empty()) {
    if (impl->options.tls_cert_file.empty() || impl->options.tls_key_file.empty()) {
      return InvalidArgumentError("TLS needs both a certificate and a key file");
    }
    ssl::context& ctx = impl->tls.emplace(ssl::context::tls_server);
    // TLS 1.2 and later only.
    ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                    ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                    ssl::context::single_dh_use);
    ctx.use_certificate_chain_file(impl->options.tls_cert_file, ec);
    if (ec) {
      return InvalidArgumentError("cannot load TLS certificate " + impl->options.tls_cert_file +
                                  ": " + ec.message());
    }
    ctx.use_private_key_file(impl->options.tls_key_file, ssl::context::pem, ec);
    if (ec) {
      return InvalidArgumentError("cannot load TLS key " + impl->options.tls_key_file + ": " +
                                  ec.message());
    }
  }
  const auto address = net::ip::make_address(impl->options.address, ec);
  if (ec) return InvalidArgumentError("bad HTTP listen address '" + impl->options.address + "'");
  const tcp::endpoint endpoint(address, impl->options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return UnavailableError("cannot listen on " + impl->options.address + ":" +
                            std::to_string(impl->options.port) + ": " + ec.message());
  }
  net::co_spawn(impl->io, impl->Accept(), net::detached);
  for (int i = 0; i < std::max(1, impl->options.threads); ++i) {
    impl->threads.emplace_back([io = &impl->io] { io->run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

std::uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    net::post(impl_->io, [this] {
      boost::system::error_code ignored;
      impl_->acceptor.close(ignored);
    });
    {
      // Cancelling wakes each stream, which ends its chunked response and closes; give them a
      // moment to do so before the event loop stops.
      std::unique_lock lock(impl_->mu);
      for (const auto& w : impl_->watches) w->Cancel();
      impl_->watches_done.wait_for(lock, kStopGrace, [this] { return impl_->watches.empty(); });
    }
    impl_->io.stop();
    for (auto& t : impl_->threads) t.join();
    // No thread runs the io_context any more, so the acceptor can be closed from here; until it
    // is, the kernel would keep accepting connections nobody serves.
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
  });
}

}  // namespace drover::registry
