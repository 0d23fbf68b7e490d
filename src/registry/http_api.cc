#include "registry/http_api.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/http_error.h"
#include "common/metrics_text.h"
#include "common/text.h"
#include "common/tokens.h"
#include "drover/discovery.h"
#include "drover/mutex.h"
#include "net/http_server.h"
#include "registry/client_limits.h"
#include "registry/dns_server.h"
#include "registry/encoding_cache.h"
#include "registry/fleet_status.h"
#include "registry/json_codec.h"
#include "registry/registry.h"
#include "registry/ui_url.h"
#include "registry/web_assets.h"
#include "registry/xds_server.h"

namespace drover::registry {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Request = net::HttpRequest;
using Response = net::HttpResponse;

namespace {

// (The server names itself in every answer: Server: drover-registry.)
Response JsonResponse(const Request& req, http::status status, const nlohmann::json& body) {
  return net::JsonResponse(req, static_cast<unsigned>(status), DumpJson(body) + "\n");
}

using net::ErrorResponse;

// 405 for a method the path does not take: UNIMPLEMENTED (the method is not supported there --
// nothing is wrong with the request's content), with the Allow header listing what is.
Response MethodNotAllowed(const Request& req, std::string_view allowed, std::string_view path) {
  std::string list(allowed);
  for (std::size_t at = 0; (at = list.find(' ', at)) != std::string::npos; at += 2) {
    list.replace(at, 1, ", ");
  }
  Response res = net::ErrorResponse(
      req,
      UnimplementedError("method " + std::string(req.method_string()) + " not allowed on " +
                         std::string(path) + "; use " + list),
      static_cast<unsigned>(http::status::method_not_allowed));
  res.set(http::field::allow, list);
  return res;
}

std::string_view AuthorizationHeader(const Request& req) {
  const auto value = req[http::field::authorization];
  return std::string_view(value.data(), value.size());
}

Response ErrorResponse(const Request& req, http::status http_status, StatusCode code,
                       std::string message) {
  return net::ErrorResponse(req, Status(code, std::move(message)),
                            static_cast<unsigned>(http_status));
}

std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> parts;
  parts.reserve(8);       // the longest API path has 6: one allocation, not one per doubling
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

// An answer sent later, from whichever thread finishes the work: `start(done)` starts it, and
// `done(result)` sends `answer(shape, result)`, where `shape` keeps what a response takes from
// its request (its version and keep-alive). The connection holds no io thread meanwhile.
template <typename T, typename Start, typename Answer>
net::HttpReply Later(const Request& req, Start&& start, Answer answer) {
  auto late = std::make_shared<net::LateReply>();
  Request shape;
  shape.version(req.version());
  shape.keep_alive(req.keep_alive());
  start([late, shape = std::move(shape), answer = std::move(answer)](Result<T> result) {
    late->Send(answer(shape, result));
  });
  return net::HttpReply(std::move(late));
}

// A write's answer: {"revision": R}, or the error. The body is written out by hand: it is the
// answer the registry sends most (every write and heartbeat), and a JSON document of one member
// costs allocations of its own.
Response RevisionReply(const Request& req, const Result<std::uint64_t>& rev) {
  if (!rev.ok()) return ErrorResponse(req, rev.status());
  return net::JsonResponse(req, static_cast<unsigned>(http::status::ok),
                           "{\"revision\":" + std::to_string(*rev) + "}\n");
}

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
constexpr std::chrono::seconds kStopGrace{2};
constexpr std::size_t kEncodedEvents = 4096;  // per io thread: a burst's events, encoded once

}  // namespace

struct HttpServer::Impl {
  Impl(Registry& r, HttpOptions o)
      : registry(r),
        options(WithLimits(std::move(o))),
        fleet(r, FleetStatusOptions{.ca_file = options.fleet_ca}) {}

  static HttpOptions WithLimits(HttpOptions o) {
    if (!o.limits) o.limits = std::make_shared<ClientLimits>();
    return o;
  }

  // The server's handler: a watch stream, a write over the client's rate, or Handle().
  // `peer`: the connection's ip:port.
  net::HttpReply Answer(const Request& req, const std::string& peer);
  // GET /v1/watch: checks, then the stream; an error response when a check fails.
  net::HttpReply Watch(const Request& req, std::string_view query, const std::string& client);
  class WatchStream;  // what a watch stream writes: every event its watcher gets
  net::HttpReply Handle(const Request& req);
  // OK when auth is off or the request carries a known token.
  Status Authenticate(const Request& req) const {
    if (!options.auth) return Status::Ok();
    return options.auth->Authenticate(AuthorizationHeader(req)).status();
  }
  Response ListServices(const Request& req);
  Response ListInstances(const Request& req, std::string_view service);
  // GET /v1/prometheus/sd[?service=S]: Prometheus' HTTP service discovery.
  Response PrometheusTargets(const Request& req, std::string_view query);
  // The instance writes: each answered once its commit is durable (a LateReply), without holding
  // an io thread meanwhile.
  net::HttpReply HandleInstance(const Request& req, std::string_view service, std::string_view id,
                                std::string_view action, std::string_view query);
  // GET /v1/fleet/{service}/{id}: a fleet part's status, through FleetStatus.
  Response HandleFleet(const Request& req, std::string_view service, std::string_view id);
  // /v1/deploys and /v1/deploys/{id} (`id` empty for the list).
  // (The store's calls are made by the registry's deploy thread, which sends the answer.)
  net::HttpReply HandleDeploys(const Request& req, std::string_view id, std::string_view query);
  // `name` is the path after "/ui/".
  Response HandleUi(const Request& req, std::string_view name);
  std::string Metrics();

  // A PUT or DELETE goes to every watcher of its service: encode it once. Each io thread keeps
  // its own recent encodings (4,096: a burst of that many changes is still encoded once), so that
  // the threads writing one event to a thousand streams share no lock.
  static std::shared_ptr<const std::string> Encoded(const EventPtr& e) {
    const auto encode = [](const Event& event) {
      return std::make_shared<const std::string>(DumpJson(EventToJson(event)) + "\n");
    };
    if (e->type != EventType::kPut && e->type != EventType::kDelete) return encode(*e);
    thread_local EncodingCache<std::shared_ptr<const std::string>> cache(kEncodedEvents);
    return cache.Get(e, encode);
  }

  Registry& registry;
  const HttpOptions options;
  std::once_flag stop_once;

  Mutex mu;
  CondVar watches_done;                                              // a watch stream ended
  std::set<std::shared_ptr<Watcher>> watches DROVER_GUARDED_BY(mu);  // live watch streams
  bool stopping DROVER_GUARDED_BY(mu) = false;                       // Stop() cancelled the watches

  FleetStatus fleet;
  std::unique_ptr<net::HttpServer> server;  // last: stopped before the rest goes
};

net::HttpReply HttpServer::Impl::Answer(const Request& req, const std::string& peer) {
  // Who limits count against: the token when tokens are checked, else the connection.
  auto client = [&] {
    return ClientIdentity(
        options.auth ? options.auth->Authenticate(AuthorizationHeader(req)) : std::string(), peer);
  };
  const std::string_view target(req.target().data(), req.target().size());
  if (req.method() == http::verb::get && target.starts_with("/v1/watch") &&
      (target.size() == 9 || target[9] == '?')) {
    return Watch(req, target.size() > 10 ? target.substr(10) : std::string_view(), client());
  }
  const bool write = req.method() == http::verb::put || req.method() == http::verb::post ||
                     req.method() == http::verb::delete_;
  if (write && target.starts_with("/v1/") && options.limits->limits_writes()) {
    if (Status limited = options.limits->TakeWriteToken(client()); !limited.ok()) {
      Response res =
          ErrorResponse(req, http::status::too_many_requests, limited.code(), limited.message());
      res.set(http::field::retry_after, "1");
      return res;
    }
  }
  return Handle(req);
}

// Every event the watcher gets, each line encoded once for every stream that sends it, until the
// client or the server goes (the server's Stop() cancels the watcher: the stream then ends
// cleanly, and the client reconnects).
class HttpServer::Impl::WatchStream final : public net::StreamSource {
 public:
  WatchStream(Impl& impl, std::shared_ptr<Watcher> watcher, WatchSlot slot)
      : impl_(impl), watcher_(std::move(watcher)), slot_(std::move(slot)) {}

  void Start(std::shared_ptr<net::StreamWakeup> wakeup) override {
    {
      MutexLock lock(impl_.mu);
      impl_.watches.insert(watcher_);
      // A stream that got here after Stop() cancelled the others ends at once.
      if (impl_.stopping) watcher_->Cancel();
    }
    // The listener runs under the registry's lock: it only lists this stream to be woken.
    watcher_->SetListener([wakeup = std::move(wakeup)] { wakeup->Notify(); });
  }

  Step Take(std::vector<std::shared_ptr<const std::string>>& pieces) override {
    // What is queued, taken whole; the watcher gets an empty vector back, so an idle stream and
    // its watcher hold no storage for events.
    std::vector<EventPtr> batch;
    // Cancelled: the server is stopping; the end of the response tells the client so.
    if (!watcher_->TakeQueued(batch).ok()) return Step::kEnd;
    if (batch.empty()) return Step::kWait;
    for (const EventPtr& e : batch) pieces.push_back(Encoded(e));
    return Step::kWrite;
  }

  void Stop() override {
    watcher_->Cancel();
    slot_.Release();
    MutexLock lock(impl_.mu);
    impl_.watches.erase(watcher_);
    impl_.watches_done.NotifyAll();
  }

  // A client that stops reading is cut off instead of pinning its backlog forever; it resumes
  // from the last revision it saw.
  Duration write_timeout() const override { return kWatchWriteTimeout; }

 private:
  Impl& impl_;
  const std::shared_ptr<Watcher> watcher_;
  WatchSlot slot_;  // the client's, given back when the stream ends
};

net::HttpReply HttpServer::Impl::Watch(const Request& req, std::string_view query_text,
                                       const std::string& client) {
  const auto query = ParseQuery(query_text);
  std::uint64_t from = 0;
  if (auto it = query.find("from"); it != query.end()) {
    auto parsed = ParseUint(it->second, "from");
    if (!parsed.ok()) return ErrorResponse(req, parsed.status());
    from = *parsed;
  }
  if (Status auth = Authenticate(req); !auth.ok()) {
    Response res = ErrorResponse(req, auth);
    res.keep_alive(false);
    return res;
  }
  if (Status admitted = options.limits->AcquireWatch(client); !admitted.ok()) {
    Response res =
        ErrorResponse(req, http::status::too_many_requests, admitted.code(), admitted.message());
    res.keep_alive(false);
    return res;
  }
  // Given back when the stream ends, or at once when there is none.
  WatchSlot slot(options.limits, client);
  std::string service;
  if (auto it = query.find("service"); it != query.end()) service = it->second;
  auto watcher = registry.Watch(from, service);
  if (!watcher.ok()) {
    Response res = ErrorResponse(req, watcher.status());
    res.keep_alive(false);
    return res;
  }
  net::HttpReply reply;
  reply.response = Response{http::status::ok, req.version()};
  reply.response.set(http::field::content_type, "application/x-ndjson");
  reply.response.set(http::field::cache_control, "no-cache");
  reply.stream = std::make_shared<WatchStream>(*this, *watcher, std::move(slot));
  return reply;
}

net::HttpReply HttpServer::Impl::Handle(const Request& req) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  const auto parts = SplitPath(path);
  const auto method = req.method();
  auto only = [&](http::verb allowed) {
    return method == allowed ? std::optional<Response>()
                             : MethodNotAllowed(req, std::string(http::to_string(allowed)), path);
  };

  if (path == "/live") {
    if (auto r = only(http::verb::get)) return *r;
    return JsonResponse(req, http::status::ok, {{"status", "alive"}});
  }
  if (path == "/ready") {
    if (auto r = only(http::verb::get)) return *r;
    // Ready, and whether any service is in self-preservation (the same on every registry of a
    // cluster): a load balancer keeps sending, an operator sees why leases stopped expiring.
    nlohmann::json degraded = nlohmann::json::array();
    for (const auto& svc : registry.Services()) {
      if (svc.degraded) degraded.push_back(svc.name);
    }
    return JsonResponse(req, http::status::ok,
                        {{"status", "ready"},
                         {"revision", registry.revision()},
                         {"degraded", !degraded.empty()},
                         {"degraded_services", std::move(degraded)}});
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
  if (parts.size() == 4 && parts[0] == "v1" && parts[1] == "fleet") {
    if (auto r = only(http::verb::get)) return *r;
    return HandleFleet(req, parts[2], parts[3]);
  }
  if (parts.size() >= 2 && parts[0] == "v1" && parts[1] == "services") {
    if (parts.size() == 2) {
      if (auto r = only(http::verb::get)) return *r;
      return ListServices(req);
    }
    if (parts.size() >= 4 && parts[3] == "instances") {
      const std::string_view service = parts[2];
      if (parts.size() == 4) {
        if (auto r = only(http::verb::get)) return *r;
        return ListInstances(req, service);
      }
      if (parts.size() <= 6) {
        return HandleInstance(req, service, parts[4], parts.size() == 6 ? parts[5] : "", query);
      }
    }
  }
  if (parts.size() == 3 && parts[0] == "v1" && parts[1] == "prometheus" && parts[2] == "sd") {
    if (auto r = only(http::verb::get)) return *r;
    return PrometheusTargets(req, query);
  }
  if (parts.size() >= 2 && parts.size() <= 3 && parts[0] == "v1" && parts[1] == "deploys") {
    return HandleDeploys(req, parts.size() == 3 ? parts[2] : "", query);
  }
  return ErrorResponse(req, http::status::not_found, StatusCode::kNotFound,
                       "no such endpoint: " + std::string(path));
}

namespace {

nlohmann::json DeployToJson(const StoredDeploy& d) {
  auto record = nlohmann::json::parse(d.record, nullptr, /*allow_exceptions=*/false);
  return {{"id", d.id},
          {"service", d.service},
          {"version", d.version},
          {"active", d.active},
          {"created_ms", d.created_ms},
          {"record", record.is_discarded() ? nlohmann::json::object() : std::move(record)}};
}

}  // namespace

net::HttpReply HttpServer::Impl::HandleDeploys(const Request& req, std::string_view id_view,
                                               std::string_view query) {
  const std::string id(id_view);
  const auto method = req.method();
  if (id.empty()) {
    if (method != http::verb::get) {
      return MethodNotAllowed(req, "GET", "/v1/deploys");
    }
    const auto params = ParseQuery(query);
    std::string service;
    if (auto it = params.find("service"); it != params.end()) service = it->second;
    std::uint64_t limit = 50;
    if (auto it = params.find("limit"); it != params.end()) {
      auto parsed = ParseUint(it->second, "limit");
      if (!parsed.ok()) return ErrorResponse(req, parsed.status());
      limit = std::clamp<std::uint64_t>(*parsed, 1, 200);
    }
    return Later<std::vector<StoredDeploy>>(
        req, [&](auto done) { registry.ListDeploysAsync(service, limit, std::move(done)); },
        [](const Request& shape, const Result<std::vector<StoredDeploy>>& list) {
          if (!list.ok()) return ErrorResponse(shape, list.status());
          nlohmann::json deploys = nlohmann::json::array();
          for (const StoredDeploy& d : *list) deploys.push_back(DeployToJson(d));
          return JsonResponse(shape, http::status::ok, {{"deploys", std::move(deploys)}});
        });
  }
  if (method == http::verb::get) {
    return Later<std::optional<StoredDeploy>>(
        req, [&](auto done) { registry.GetDeployAsync(id, std::move(done)); },
        [id](const Request& shape, const Result<std::optional<StoredDeploy>>& found) {
          if (!found.ok()) return ErrorResponse(shape, found.status());
          if (!*found) return ErrorResponse(shape, NotFoundError("no deploy " + id));
          return JsonResponse(shape, http::status::ok, DeployToJson(**found));
        });
  }
  if (method != http::verb::put) {
    return MethodNotAllowed(req, "GET PUT", "/v1/deploys/" + id);
  }
  auto body = ParseObject(req.body(), {"expect_version", "active", "record"});
  if (!body.ok()) return ErrorResponse(req, body.status());
  auto expect = GetUint(*body, "expect_version", true);
  if (!expect.ok()) return ErrorResponse(req, expect.status());
  auto active = GetBool(*body, "active", false);
  if (!active.ok()) return ErrorResponse(req, active.status());
  const auto record = body->find("record");
  if (record == body->end()) {
    return ErrorResponse(req, InvalidArgumentError("missing member 'record'"));
  }
  auto d = DeployFromRecord(
      id, record->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), *active);
  if (!d.ok()) return ErrorResponse(req, d.status());
  // Recording a deploy is deploying: the same right the agents ask for.
  if (options.auth) {
    if (Status s = options.auth->AuthorizeDeploy(AuthorizationHeader(req), d->service); !s.ok()) {
      return ErrorResponse(req, s);
    }
  }
  return Later<std::uint64_t>(
      req, [&](auto done) { registry.PutDeployAsync(std::move(*d), *expect, std::move(done)); },
      [id](const Request& shape, const Result<std::uint64_t>& version) {
        if (!version.ok()) return ErrorResponse(shape, version.status());
        return JsonResponse(shape, http::status::ok, {{"id", id}, {"version", *version}});
      });
}

Response HttpServer::Impl::HandleFleet(const Request& req, std::string_view service,
                                       std::string_view id) {
  auto answer = fleet.Get(std::string(service), std::string(id));
  if (!answer.ok()) return ErrorResponse(req, answer.status());
  if (answer->status != 200) {
    return ErrorResponse(req, http::status::bad_gateway, StatusCode::kUnavailable,
                         answer->url + " answered HTTP " + std::to_string(answer->status));
  }
  Response res{http::status::ok, req.version()};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");
  // How old the figures are: the page says so instead of passing them off as live.
  res.set(
      "X-Drover-Age-Ms",
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(answer->age).count()));
  res.keep_alive(req.keep_alive());
  res.body() = std::move(answer->body);
  res.prepare_payload();
  return res;
}

Response HttpServer::Impl::ListServices(const Request& req) {
  nlohmann::json services = nlohmann::json::array();
  bool degraded = false;
  for (const auto& s : registry.Services()) {
    degraded |= s.degraded;
    services.push_back({{"name", s.name},
                        {"instances", s.instances},
                        {"ready", s.ready},
                        {"ready_versions", s.ready_versions},
                        {"degraded", s.degraded}});
  }
  return JsonResponse(req, http::status::ok,
                      {{"revision", registry.revision()},
                       {"degraded", degraded},
                       {"services", std::move(services)}});
}

Response HttpServer::Impl::ListInstances(const Request& req, std::string_view service) {
  auto list = registry.List(std::string(service));
  if (!list.ok()) return ErrorResponse(req, list.status());
  nlohmann::json instances = nlohmann::json::array();
  for (std::size_t i = 0; i < list->instances.size(); ++i) {
    nlohmann::json in = InstanceToJson(list->instances[i]);
    // Not in watch events: a renewal changes no revision, so only a read can show it.
    in["lease_remaining_ms"] =
        std::chrono::duration_cast<std::chrono::milliseconds>(list->lease_remaining[i]).count();
    instances.push_back(std::move(in));
  }
  return JsonResponse(req, http::status::ok,
                      {{"revision", list->revision},
                       {"degraded", list->degraded},
                       {"instances", std::move(instances)}});
}

namespace {

// `prefix` + `key` as a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*; the prefix supplies the
// first character): every other character of `key` becomes '_', as Prometheus' own service
// discoveries do with Kubernetes labels.
std::string PrometheusLabelName(std::string_view prefix, std::string_view key) {
  std::string name(prefix);
  for (const char c : key) {
    const bool kept = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    name += kept ? c : '_';
  }
  return name;
}

// One instance as a Prometheus target group: its own group, so its labels are its own.
nlohmann::json TargetGroup(const Instance& in) {
  const auto metrics = in.spec.labels.find(std::string(kMetricsLabel));
  nlohmann::json labels = {{"__meta_drover_service", in.service},
                           {"__meta_drover_instance", in.id},
                           {"__meta_drover_zone", in.spec.zone},
                           {"__meta_drover_version", in.spec.version},
                           {"__meta_drover_state", std::string(InstanceStateName(in.spec.state))},
                           {"__meta_drover_address", in.spec.address}};
  for (const auto& [key, value] : in.spec.labels) {
    // Keys that differ only where '_' replaced a character ("a.b", "a-b") meet on one name: the
    // first in key order keeps it, so the answer does not depend on anything but the labels.
    labels.emplace(PrometheusLabelName("__meta_drover_label_", key), value);
  }
  const std::string& target = metrics != in.spec.labels.end() ? metrics->second : in.spec.address;
  return {{"targets", nlohmann::json::array({target})}, {"labels", std::move(labels)}};
}

}  // namespace

Response HttpServer::Impl::PrometheusTargets(const Request& req, std::string_view query) {
  const auto params = ParseQuery(query);
  std::vector<std::string> services;
  if (auto it = params.find("service"); it != params.end()) {
    services.push_back(it->second);  // checked by List: an invalid name is INVALID_ARGUMENT
  } else {
    for (const ServiceSummary& s : registry.Services()) services.push_back(s.name);
  }
  // Only what a client would pick: READY and accepting. The target is where the instance says
  // its metrics are (ServerHost: its probe port, which serves /metrics), else its own address --
  // a server without the SDK that registers no label is taken to serve /metrics where its
  // clients connect. Each service is read on its own (one lock each), so a write between two
  // services may show in one and not the other; the next refresh sees both.
  nlohmann::json groups = nlohmann::json::array();
  for (const std::string& service : services) {
    auto list = registry.List(service);
    if (!list.ok()) return ErrorResponse(req, list.status());
    for (const Instance& in : list->instances) {
      if (in.Serving()) groups.push_back(TargetGroup(in));
    }
  }
  return JsonResponse(req, http::status::ok, groups);
}

Response HttpServer::Impl::HandleUi(const Request& req, std::string_view name) {
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    return MethodNotAllowed(req, "GET HEAD", "/ui/");
  }
  Response res{http::status::ok, req.version()};
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

net::HttpReply HttpServer::Impl::HandleInstance(const Request& req, std::string_view service_view,
                                                std::string_view id_view, std::string_view action,
                                                std::string_view query) {
  const std::string service(service_view), id(id_view);
  const auto method = req.method();
  // A write queued to the registry: `start(done)` queues it; `done` runs once the write is
  // committed (Registry::RegisterAsync says on which thread; at once when refused), and sends
  // the response.
  auto later = [&](auto&& start) { return Later<std::uint64_t>(req, start, RevisionReply); };
  auto not_allowed = [&] {
    const std::string_view target(req.target().data(), req.target().size());
    return MethodNotAllowed(req, action.empty() ? "PUT DELETE" : "POST",
                            target.substr(0, target.find('?')));
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
      return later([&](Registry::Done done) {
        registry.RegisterAsync(service, id, std::move(*spec), std::move(done));
      });
    }
    if (method == http::verb::delete_) {
      auto params = ParseQuery(query);
      auto it = params.find("generation");
      if (it == params.end()) {
        return ErrorResponse(req, InvalidArgumentError("missing query parameter 'generation'"));
      }
      auto generation = ParseUint(it->second, "generation");
      if (!generation.ok()) return ErrorResponse(req, generation.status());
      return later([&](Registry::Done done) {
        registry.DeregisterAsync(service, id, *generation, std::move(done));
      });
    }
    return not_allowed();
  }
  if (method != http::verb::post) return not_allowed();
  if (action == "heartbeat") {
    auto body = ParseObject(req.body(), {"generation"});
    if (!body.ok()) return ErrorResponse(req, body.status());
    auto generation = GetUint(*body, "generation", true);
    if (!generation.ok()) return ErrorResponse(req, generation.status());
    return RevisionReply(req, registry.Heartbeat(service, id, *generation));
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
    return later([&](Registry::Done done) {
      registry.SetStateAsync(service, id, *generation, state, accepting, std::move(done));
    });
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
  const CommitCounters commits = registry.commit_counters();
  out.Counter("drover_registry_store_commits_total",
              "Store commits (SQLite: one transaction and fsync each, holding every write of a "
              "group commit; etcd: one transaction per write)",
              static_cast<double>(commits.commits));
  out.Counter("drover_registry_committed_writes_total",
              "Writes committed (their ratio to drover_registry_store_commits_total is the mean "
              "group-commit batch)",
              static_cast<double>(commits.writes));
  out.Gauge("drover_registry_largest_commit_writes", "Writes in the largest store commit so far",
            static_cast<double>(commits.largest));
  for (const auto& s : registry.Services()) {
    out.Gauge("drover_registry_instances", "Registered instances per service",
              static_cast<double>(s.instances), {{"service", s.name}});
    out.Gauge("drover_registry_ready_instances", "READY instances per service",
              static_cast<double>(s.ready), {{"service", s.name}});
    out.Gauge("drover_registry_degraded", "1 while a service is in self-preservation",
              s.degraded ? 1 : 0, {{"service", s.name}});
  }
  const net::ConnectionCounters& connections = server->connections();
  out.Gauge("drover_registry_http_connections", "Open HTTP connections",
            static_cast<double>(connections.active.load()));
  out.Counter("drover_registry_http_refused_connections_total",
              "Connections answered 503 for being over max_connections",
              static_cast<double>(connections.refused.load()));
  MutexLock lock(mu);
  out.Gauge("drover_registry_watch_streams", "Open HTTP watch streams",
            static_cast<double>(watches.size()));
  out.Counter("drover_registry_refused_watches_total",
              "Watch streams (HTTP and gRPC) refused for being over max_watches_per_client or "
              "max_watches",
              static_cast<double>(options.limits->refused_watches()));
  out.Counter("drover_registry_rate_limited_writes_total",
              "Writes (HTTP and gRPC) refused for being over the client's write rate",
              static_cast<double>(options.limits->rate_limited_writes()));
  if (const DnsCounters* dns = options.dns.get()) {
    out.Counter("drover_registry_dns_queries_total", "DNS queries answered, by transport",
                static_cast<double>(dns->udp_queries.load()), {{"transport", "udp"}});
    out.Counter("drover_registry_dns_queries_total", "DNS queries answered, by transport",
                static_cast<double>(dns->tcp_queries.load()), {{"transport", "tcp"}});
    out.Counter("drover_registry_dns_nxdomain_total", "DNS answers NXDOMAIN (no such name)",
                static_cast<double>(dns->nxdomain.load()));
    out.Counter("drover_registry_dns_refused_total",
                "DNS queries refused (outside the domain, ANY, transfers, other classes) or NOTIMP",
                static_cast<double>(dns->refused.load()));
    out.Counter("drover_registry_dns_malformed_total",
                "DNS messages that did not parse (FORMERR) or were too short to answer",
                static_cast<double>(dns->malformed.load()));
    out.Counter("drover_registry_dns_truncated_total",
                "DNS answers sent with TC (too long for UDP: the client asks again over TCP)",
                static_cast<double>(dns->truncated.load()));
  }
  if (const XdsCounters* xds = options.xds.get()) {
    out.Gauge("drover_registry_xds_streams", "Open xDS (ADS) streams",
              static_cast<double>(xds->streams.load()));
    out.Counter("drover_registry_xds_refused_streams_total",
                "xDS streams refused (not in --xds-allow, or over a stream limit)",
                static_cast<double>(xds->refused_streams.load()));
    out.Counter("drover_registry_xds_responses_total", "xDS responses sent",
                static_cast<double>(xds->responses.load()));
    out.Counter("drover_registry_xds_nacks_total",
                "xDS responses a client refused (NACK; logged with its error)",
                static_cast<double>(xds->nacks.load()));
    out.Gauge("drover_registry_xds_version", "Version of the newest xDS snapshot",
              static_cast<double>(xds->version.load()));
  }
  for (const auto& [status, count] : server->responses()) {
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
  const HttpOptions& o = impl->options;
  net::HttpServerOptions so;
  so.name = "registry";
  so.address = o.address;
  so.threads = o.threads;
  so.max_connections = o.max_connections;
  so.max_body = o.max_body;
  // A deploy record grows with its fleet (about 1 KiB per instance): up to 8 MiB, whatever
  // --max-body says for the rest.
  so.larger_bodies = {{"/v1/deploys/", 8 << 20}};
  so.idle_timeout = o.idle_timeout;
  so.tls_cert_file = o.tls_cert_file;
  so.tls_key_file = o.tls_key_file;
  Impl* raw = impl.get();
  DROVER_ASSIGN_OR_RETURN(
      impl->server,
      net::HttpServer::Start(std::move(so), [raw](const Request& req, const std::string& client) {
        return raw->Answer(req, client);
      }));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

std::uint16_t HttpServer::port() const { return impl_->server->port(); }

void HttpServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->server->StopAccepting();
    {
      // Cancelling wakes each stream, which ends its chunked response and closes; give them a
      // moment to do so before the event loop stops.
      MutexLock lock(impl_->mu);
      impl_->stopping = true;
      for (const auto& w : impl_->watches) w->Cancel();
      impl_->watches_done.WaitFor(impl_->mu, kStopGrace, [this]() DROVER_REQUIRES(impl_->mu) {
        return impl_->watches.empty();
      });
    }
    impl_->server->Stop();
  });
}

}  // namespace drover::registry
