#include "rollout/agent_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/beast/http.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/host_port.h"
#include "common/text.h"
#include "common/tokens.h"
#include "drover/mutex.h"
#include "net/http_server.h"
#include "rollout/json_codec.h"

namespace drover::rollout {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;
using Request = net::HttpRequest;
using Response = net::HttpResponse;
using Query = std::map<std::string, std::string, std::less<>>;

constexpr std::size_t kMaxBody = 64 * 1024;
constexpr std::size_t kMaxConnections = 64;
constexpr std::size_t kMaxDeploys = 200;
// A stop holds its request (and the io thread serving it) for up to its grace: enough threads
// that a few slow stops leave the rest of the API answering.
constexpr int kThreads = 16;

// The registry's dashboard, another origin, reads the deploy history from the browser. Only
// what it needs is opened to other origins: /v1/instances carries each launch spec's argv and
// environment, which a page the operator happens to visit must not be able to read from a
// loopback agent; writes stay closed too.
bool ReadableFromAnyOrigin(std::string_view path) {
  return path == "/live" || path == "/v1/deploys";
}

Response Reply(const Request& req, const json& body) {
  // Paths and records may carry bytes that are not UTF-8: replaced, never a throw.
  return net::JsonResponse(req, 200,
                           body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
}

}  // namespace

struct AgentServer::Impl {
  Platform* platform = nullptr;
  std::shared_ptr<const Authorizer> auth;
  std::string deploys_path;
  HostPort address;  // as given; the port is the server's
  std::unique_ptr<net::HttpServer> server;

  Mutex deploys_mu;
  json deploys DROVER_GUARDED_BY(deploys_mu) = json::array();  // newest first

  Status LoadDeploys() {
    std::ifstream in(deploys_path);
    if (!in) return Status::Ok();
    MutexLock lock(deploys_mu);
    try {
      deploys = json::parse(in);
      if (!deploys.is_array()) throw std::runtime_error("not an array");
    } catch (const std::exception& e) {
      return DataLossError("cannot read " + deploys_path + ": " + e.what() +
                           " (move it away to start with an empty history)");
    }
    return Status::Ok();
  }

  Status SaveDeploys() DROVER_REQUIRES(deploys_mu) {
    return WriteFileAtomically(deploys_path,
                               deploys.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  }

  Response Handle(const Request& req) {
    const std::string_view target(req.target().data(), req.target().size());
    const std::size_t qmark = target.find('?');
    const std::string_view path = target.substr(0, qmark);
    const Query query = ParseQuery(qmark == std::string_view::npos ? "" : target.substr(qmark + 1));
    Response res = Route(req, path, query);
    if (req.method() == http::verb::get && ReadableFromAnyOrigin(path)) {
      res.set(http::field::access_control_allow_origin, "*");
    }
    return res;
  }

  static std::string_view Authorization(const Request& req) {
    const auto value = req[http::field::authorization];
    return {value.data(), value.size()};
  }

  // OK when auth is off or the request carries a known token.
  Status Authenticate(const Request& req) const {
    if (!auth) return Status::Ok();
    return auth->Authenticate(Authorization(req)).status();
  }

  // OK when auth is off or the request's token may deploy `service`.
  Status AuthorizeDeploy(const Request& req, std::string_view service) const {
    if (!auth) return Status::Ok();
    return auth->AuthorizeDeploy(Authorization(req), service);
  }

  Response Route(const Request& req, std::string_view path, const Query& query) {
    const auto method = req.method();
    if (path == "/live") return Live(req);
    if (Status s = Authenticate(req); !s.ok()) return net::ErrorResponse(req, s);
    if (path == "/v1/instances") {
      if (method == http::verb::get) return ListInstances(req, query);
      if (method == http::verb::post) return StartInstance(req);
      return net::ErrorResponse(req, InvalidArgumentError("use GET or POST on /v1/instances"));
    }
    if (path.starts_with("/v1/instances/") && method == http::verb::delete_) {
      return StopInstance(req, path.substr(std::string_view("/v1/instances/").size()), query);
    }
    if (path == "/v1/deploys" && method == http::verb::get) return ListDeploys(req, query);
    if (path.starts_with("/v1/deploys/") && method == http::verb::put) {
      return PutDeploy(req, path.substr(std::string_view("/v1/deploys/").size()));
    }
    return net::ErrorResponse(
        req, NotFoundError("no such endpoint: " + std::string(req.method_string()) + " " +
                           std::string(path)));
  }

  static Response Live(const Request& req) {
    Response res{http::status::ok, req.version()};
    res.set(http::field::content_type, "text/plain");
    res.keep_alive(req.keep_alive());
    res.body() = "live\n";
    res.prepare_payload();
    return res;
  }

  Response ListInstances(const Request& req, const Query& query) {
    auto service = query.find("service");
    auto list = platform->List(service == query.end() ? "" : service->second);
    if (!list.ok()) return net::ErrorResponse(req, list.status());
    json out = json::array();
    for (const InstanceInfo& i : *list) out.push_back(InstanceInfoToJson(i));
    return Reply(req, {{"instances", std::move(out)}});
  }

  Response StartInstance(const Request& req) {
    const json body = json::parse(req.body(), nullptr, false);
    if (body.is_discarded())
      return net::ErrorResponse(req, InvalidArgumentError("body is not JSON"));
    auto spec = LaunchSpecFromJson(body);
    if (!spec.ok()) return net::ErrorResponse(req, spec.status());
    if (Status s = AuthorizeDeploy(req, spec->service); !s.ok()) return net::ErrorResponse(req, s);
    if (Status s = platform->Start(*spec); !s.ok()) return net::ErrorResponse(req, s);
    return Reply(req, {{"id", spec->id}});
  }

  Response StopInstance(const Request& req, std::string_view id_view, const Query& query) {
    const std::string id(id_view);
    std::int64_t grace_ms = 10'000;
    if (auto g = query.find("grace_ms"); g != query.end()) {
      try {
        grace_ms = std::stoll(g->second);
      } catch (...) {
        grace_ms = -1;
      }
      if (grace_ms < 0 || grace_ms > 600'000) {
        return net::ErrorResponse(req, InvalidArgumentError("grace_ms must be 0..600000"));
      }
    }
    if (auth) {
      // The rights are per service: the instance's own, looked up first.
      auto service = ServiceOf(id);
      if (!service.ok()) return net::ErrorResponse(req, service.status());
      if (Status s = AuthorizeDeploy(req, *service); !s.ok()) return net::ErrorResponse(req, s);
    }
    if (Status s = platform->Stop(id, std::chrono::milliseconds(grace_ms)); !s.ok()) {
      return net::ErrorResponse(req, s);
    }
    return Reply(req, {{"id", id}});
  }

  Result<std::string> ServiceOf(const std::string& id) {
    DROVER_ASSIGN_OR_RETURN(std::vector<InstanceInfo> all, platform->List(""));
    for (const InstanceInfo& i : all) {
      if (i.spec.id == id) return i.spec.service;
    }
    return NotFoundError("no instance " + id);
  }

  Response ListDeploys(const Request& req, const Query& query) {
    auto service = query.find("service");
    MutexLock lock(deploys_mu);
    json out = json::array();
    for (const json& d : deploys) {
      if (service == query.end() || d.value("service", "") == service->second) out.push_back(d);
    }
    return Reply(req, {{"deploys", std::move(out)}});
  }

  Response PutDeploy(const Request& req, std::string_view id_view) {
    const std::string id(id_view);
    json record = json::parse(req.body(), nullptr, false);
    if (Status s = ValidateName("deploy id", id); !s.ok()) return net::ErrorResponse(req, s);
    if (record.is_discarded() || !record.is_object() || !record.contains("service") ||
        !record["service"].is_string()) {
      return net::ErrorResponse(
          req, InvalidArgumentError("a deploy record is a JSON object with a service"));
    }
    if (Status s = AuthorizeDeploy(req, record["service"].get<std::string>()); !s.ok()) {
      return net::ErrorResponse(req, s);
    }
    record["id"] = id;
    MutexLock lock(deploys_mu);
    auto same = std::find_if(deploys.begin(), deploys.end(),
                             [&](const json& d) { return d.value("id", "") == id; });
    if (same != deploys.end()) {
      *same = std::move(record);
    } else {
      deploys.insert(deploys.begin(), std::move(record));
      if (deploys.size() > kMaxDeploys) deploys.erase(deploys.begin() + kMaxDeploys, deploys.end());
    }
    if (Status s = SaveDeploys(); !s.ok()) return net::ErrorResponse(req, s);
    return Reply(req, {{"id", id}});
  }
};

AgentServer::AgentServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<AgentServer>> AgentServer::Start(Platform& platform, AgentServerOptions o) {
  auto impl = std::make_unique<Impl>();
  impl->platform = &platform;
  impl->auth = std::move(o.auth);
  impl->deploys_path = o.data_dir + "/deploys.json";
  DROVER_ASSIGN_OR_RETURN(impl->address,
                          ParseHostPort(o.address, "agent address", {.allow_port_zero = true}));
  DROVER_RETURN_IF_ERROR(impl->LoadDeploys());
  net::HttpServerOptions options;
  options.name = "agent";
  options.address = o.address;
  options.threads = kThreads;
  options.max_connections = kMaxConnections;
  options.max_body = kMaxBody;
  options.idle_timeout = std::chrono::seconds(30);
  options.tls_cert_file = std::move(o.tls_cert_file);
  options.tls_key_file = std::move(o.tls_key_file);
  Impl* raw = impl.get();
  DROVER_ASSIGN_OR_RETURN(
      impl->server,
      net::HttpServer::Start(std::move(options), [raw](const Request& req, const std::string&) {
        return net::HttpReply(raw->Handle(req));
      }));
  return std::unique_ptr<AgentServer>(new AgentServer(std::move(impl)));
}

AgentServer::~AgentServer() { impl_->server->Stop(); }

std::uint16_t AgentServer::port() const { return impl_->server->port(); }

bool AgentServer::tls() const { return impl_->server->tls(); }

std::string AgentServer::address() const { return impl_->address.WithPort(port()).ToString(); }

}  // namespace drover::rollout
