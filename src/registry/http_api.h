// The registry's HTTP/1.1 + JSON API (REG-6), on Boost.Beast over Asio with C++20 coroutines.
//
// clang-format off
//   PUT    /v1/services/{service}/instances/{id}            register (body: InstanceSpec JSON)
//   POST   /v1/services/{service}/instances/{id}/heartbeat  {"generation": G}
//   POST   /v1/services/{service}/instances/{id}/state      {"generation": G, "state"?, "accepting"?}
//   DELETE /v1/services/{service}/instances/{id}?generation=G
//   GET    /v1/services                                     summaries
//   GET    /v1/services/{service}/instances                 {"revision","degraded","instances"}
//   GET    /v1/watch?from=REV[&service=S]                   chunked JSON lines, one event each
//   GET    /v1/prometheus/sd[?service=S]                    Prometheus HTTP SD target groups
//   GET    /metrics  /live  /ready
//   GET    /ui/ (and /ui/<file>)                            the dashboard (web/, compiled in)
//   GET    /ui/config.json                                  {"gateways":[url],"agents":[url]}
//   GET    /  and  /ui                                      302 to /ui/
// clang-format on
//
// Errors are {"error":{"code":"FENCED|INVALID_ARGUMENT|...","message":...}} with the matching HTTP
// status. With `auth` set, /v1 and /ui/config.json need "Authorization: Bearer <token>" (see
// auth.h); the dashboard's static files hold no data and stay open, like /live. Bodies above
// `max_body` get 413 before they are read in full. With a certificate and key the server speaks
// HTTPS only (TLS 1.2+).
//
// Served by net::HttpServer (net/http_server.h), which reads requests, answers malformed and
// oversized ones and refuses connections over the limit the same way for every Drover API.
//
// Threading: `threads` threads run the server's io_context; each connection on its own strand.
// Reads and heartbeats are answered in place (memory only). An instance write (register, state,
// deregister) is queued to the Registry and answered by it once the commit that
// holds it is durable (net::LateReply): no io thread waits for a commit, and concurrent writes
// share group commits as the gRPC API's do. Deploy records are written in place (rare). A watch
// stream is parked between events (net::StreamSource): a thousand idle watches cost no thread
// and no coroutine. Stop() (or the destructor) closes the listener, cancels every watch, lets
// the streams end (2 s at most) and joins the threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover {
class Authorizer;
}  // namespace drover

namespace drover::registry {

class ClientLimits;
class Registry;

struct DnsCounters;
struct XdsCounters;

struct HttpOptions {
  std::string address = "127.0.0.1:0";  // "ip:port"; port 0: any free port (see port())
  int threads = 2;
  std::size_t max_body = 64 * 1024;
  // Protection (REG-8): connections open at once (more are answered 503 and closed), and the
  // per-client limits (client_limits.h) on watch streams (more get 429) and writes -- PUT, POST,
  // DELETE under /v1 -- (429 with Retry-After). Null limits: ClientLimitOptions' defaults. Give
  // the gRPC server the same object to count a client's calls on both APIs together.
  std::size_t max_connections = 4096;
  std::shared_ptr<ClientLimits> limits;
  Duration idle_timeout = std::chrono::seconds(60);  // keep-alive connections without a request
  // Null: no authentication. Otherwise every /v1 request needs a bearer token, and writes a
  // token allowed to write the service (401 / 403). /live, /ready and /metrics stay open.
  std::shared_ptr<const Authorizer> auth;
  // Both set: HTTPS only, with this PEM certificate chain and private key.
  std::string tls_cert_file;
  std::string tls_key_file;
  // What /ui/config.json tells the dashboard: base URLs (http[s]://host:port, no path) of the
  // gateways' admin endpoints and of the agents whose panels it shows. The registry never calls
  // them; the browser does, so they must be reachable from where the page is opened.
  std::vector<std::string> ui_gateways;
  std::vector<std::string> ui_agents;
  // PEM CAs for fleet parts (gateways, agents) registered with scheme https, whose status
  // GET /v1/fleet/{service}/{id} fetches (fleet_status.h); empty: the system's trust store.
  std::string fleet_ca;
  // The DNS server's counters (dns_server.h), for /metrics; null without --dns.
  std::shared_ptr<const DnsCounters> dns;
  // The xDS server's counters (xds_server.h), for /metrics; null without --xds.
  std::shared_ptr<const XdsCounters> xds;
};

class HttpServer {
 public:
  // Binds and starts serving. The Registry must outlive the server.
  static Result<std::unique_ptr<HttpServer>> Start(Registry& registry, HttpOptions options);
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const;
  // Idempotent; safe from any thread except the server's own.
  void Stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::registry
