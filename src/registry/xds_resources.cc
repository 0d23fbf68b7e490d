#include "registry/xds_resources.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/host_port.h"
#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/config/route/v3/route.pb.h"
#include "envoy/extensions/filters/http/router/v3/router.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "envoy/service/discovery/v3/ads.pb.h"

namespace drover::registry {

namespace core = envoy::config::core::v3;
namespace endpoint = envoy::config::endpoint::v3;
namespace hcm = envoy::extensions::filters::network::http_connection_manager::v3;
using envoy::config::cluster::v3::Cluster;
using envoy::config::listener::v3::Listener;
using envoy::config::route::v3::RouteConfiguration;

namespace {

constexpr std::string_view kRouterFilter = "envoy.filters.http.router";

RouteConfiguration Route(const std::string& service) {
  RouteConfiguration route;
  route.set_name(service);
  auto* host = route.add_virtual_hosts();
  host->set_name(service);
  // add_domains("*") would trip a false -Wrestrict in GCC 12's inlined string copy.
  *host->add_domains() = std::string(1, '*');
  auto* r = host->add_routes();
  r->mutable_match()->set_prefix("");
  r->mutable_route()->set_cluster(service);
  return route;
}

std::string ListenerOf(const std::string& service, const RouteConfiguration& route) {
  hcm::HttpConnectionManager manager;
  manager.set_stat_prefix(service);
  *manager.mutable_route_config() = route;
  auto* router = manager.add_http_filters();
  router->set_name(std::string(kRouterFilter));
  router->mutable_typed_config()->PackFrom(envoy::extensions::filters::http::router::v3::Router());
  Listener listener;
  listener.set_name(service);
  listener.mutable_api_listener()->mutable_api_listener()->PackFrom(manager);
  return listener.SerializeAsString();
}

std::string ClusterOf(const std::string& service) {
  Cluster cluster;
  cluster.set_name(service);
  cluster.set_type(Cluster::EDS);
  auto* eds = cluster.mutable_eds_cluster_config();
  eds->mutable_eds_config()->mutable_ads();
  eds->mutable_eds_config()->set_resource_api_version(core::V3);
  eds->set_service_name(service);
  cluster.set_lb_policy(Cluster::ROUND_ROBIN);
  return cluster.SerializeAsString();
}

std::string EndpointsOf(const std::string& service, const std::vector<Instance>& instances) {
  endpoint::ClusterLoadAssignment assignment;
  assignment.set_cluster_name(service);
  std::map<std::string, endpoint::LocalityLbEndpoints*> by_zone;  // sorted: a stable order
  std::map<std::string, std::uint64_t> zone_weight;
  std::vector<const Instance*> sorted;
  for (const Instance& in : instances) sorted.push_back(&in);
  std::sort(sorted.begin(), sorted.end(),
            [](const Instance* a, const Instance* b) { return a->id < b->id; });
  for (const Instance* in : sorted) {
    core::HealthStatus health;
    if (in->Serving()) {
      health = core::HEALTHY;
    } else if (in->spec.state == InstanceState::kDraining) {
      health = core::DRAINING;
    } else {
      continue;
    }
    auto address = ParseHostPort(in->spec.address, "address");
    if (!address.ok() || !address->is_ip()) continue;
    auto [it, fresh] = by_zone.try_emplace(in->spec.zone, nullptr);
    if (fresh) {
      it->second = assignment.add_endpoints();
      it->second->mutable_locality()->set_zone(in->spec.zone);
    }
    auto* lb = it->second->add_lb_endpoints();
    auto* socket = lb->mutable_endpoint()->mutable_address()->mutable_socket_address();
    socket->set_address(address->host);
    socket->set_port_value(address->port);
    lb->set_health_status(health);
    const std::uint32_t weight = std::max<std::uint32_t>(in->spec.weight, 1);
    lb->mutable_load_balancing_weight()->set_value(weight);
    if (health == core::HEALTHY) zone_weight[in->spec.zone] += weight;
  }
  // A locality's weight is what it can take now: its HEALTHY instances' weights. Counting DRAINING
  // ones would send a zone's whole share to the few still serving there; a zone with none serving
  // gets no weight, and gRPC sends it nothing.
  for (auto& [zone, locality] : by_zone) {
    locality->mutable_load_balancing_weight()->set_value(static_cast<std::uint32_t>(
        std::min<std::uint64_t>(zone_weight[zone], std::numeric_limits<std::uint32_t>::max())));
  }
  return assignment.SerializeAsString();
}

}  // namespace

XdsServiceResources BuildXdsResources(const std::string& service,
                                      const std::vector<Instance>& instances) {
  XdsServiceResources r;
  const RouteConfiguration route = Route(service);
  r.listener = ListenerOf(service, route);
  r.route = route.SerializeAsString();
  r.cluster = ClusterOf(service);
  r.endpoints = EndpointsOf(service, instances);
  return r;
}

std::shared_ptr<const std::string> XdsSnapshot::Find(std::string_view type_url,
                                                     std::string_view name) const {
  auto it = services.find(name);
  if (it == services.end()) return nullptr;
  const XdsServiceResources& r = *it->second;
  const std::string* bytes = nullptr;
  if (type_url == kListenerType) bytes = &r.listener;
  if (type_url == kRouteType) bytes = &r.route;
  if (type_url == kClusterType) bytes = &r.cluster;
  if (type_url == kEndpointType) bytes = &r.endpoints;
  if (bytes == nullptr) return nullptr;
  return std::shared_ptr<const std::string>(it->second, bytes);  // owned by the service's
}

namespace {

using Held = std::map<std::string, std::shared_ptr<const std::string>, std::less<>>;

bool SameBytes(const std::shared_ptr<const std::string>& a,
               const std::shared_ptr<const std::string>& b) {
  return a == b || *a == *b;  // unchanged services keep their pointers; the rest are compared
}

bool SameResources(const Held& a, const Held& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](auto& x, auto& y) {
           return x.first == y.first && SameBytes(x.second, y.second);
         });
}

}  // namespace

// One resource type of one stream.
struct XdsSession::Type {
  std::string_view url;
  bool wildcard_allowed = false;  // Listener and Cluster: no names is every resource
  bool requested = false;         // the client has asked at least once
  bool wildcard = false;          // its first request named nothing (or "*"): every resource
  bool answer = false;            // a request awaits an answer even if nothing changed
  bool send_all = false;          // ... one without a nonce: with everything, even unchanged
  bool partial = false;           // Route, ClusterLoadAssignment: a response may leave out some
  std::set<std::string, std::less<>> names;
  Held sent;  // what the client holds: everything the responses so far gave it, still subscribed
  std::string last_nonce;
  std::string nacked_nonce;  // logged already
};

XdsSession::XdsSession(std::string peer) : peer_(std::move(peer)) {
  for (auto [url, wildcard] : {std::pair{kListenerType, true}, std::pair{kClusterType, true},
                               std::pair{kEndpointType, false}, std::pair{kRouteType, false}}) {
    auto type = std::make_unique<Type>();
    type->url = url;
    type->wildcard_allowed = wildcard;
    type->partial = !wildcard;
    types_.push_back(std::move(type));
  }
}

XdsSession::~XdsSession() = default;

XdsSession::Type* XdsSession::Find(std::string_view type_url) {
  for (auto& t : types_) {
    if (t->url == type_url) return t.get();
  }
  return nullptr;
}

void XdsSession::OnRequest(const Request& request) {
  if (request.has_node() && node_id_.empty()) node_id_ = request.node().id();
  Type* type = Find(request.type_url());
  if (type == nullptr) {
    // Not a type gRPC's xDS client needs: nothing to serve it with. Said once per stream, so a
    // client that keeps asking cannot fill the log.
    if (unknown_types_logged_.size() < 16 &&
        unknown_types_logged_.insert(request.type_url()).second) {
      spdlog::warn("registry xds: {} (node '{}') asked for type '{}', which is not served", peer_,
                   node_id_, request.type_url());
    }
    return;
  }
  std::set<std::string, std::less<>> names(request.resource_names().begin(),
                                           request.resource_names().end());
  // A resource the client no longer asks for, it no longer holds (gRPC drops a resource nothing
  // watches): forgotten, so that asking again sends it again -- even when the two requests come
  // together, or with a stale nonce. (Forgetting too much only sends more.)
  if (type->partial) {
    std::erase_if(type->sent, [&](const auto& held) { return !names.contains(held.first); });
  }
  // A request answering an older response than the newest: its subscription may be out of date;
  // the ACK of the newest will carry the current one.
  if (!request.response_nonce().empty() && request.response_nonce() != type->last_nonce) return;
  if (request.has_error_detail()) {
    ++nacks_;
    if (type->nacked_nonce != request.response_nonce()) {
      type->nacked_nonce = request.response_nonce();
      spdlog::warn(
          "registry xds: {} (node '{}') refused {} version {} (nonce {}): {}; not sent again "
          "until it changes",
          peer_, node_id_, type->url, request.version_info(), request.response_nonce(),
          request.error_detail().message());
    }
  }
  const bool first = !type->requested;
  // Only a first request that names nothing (or "*") subscribes to everything; a later empty
  // list is the client unsubscribing from its last name (gRPC sends one).
  if (first) type->wildcard = type->wildcard_allowed && (names.empty() || names.contains("*"));
  names.erase("*");
  const bool changed = names != type->names;
  type->requested = true;
  type->names = std::move(names);
  // The first request of a type is always answered -- with nothing, if nothing exists: that is
  // how a client learns a listener or cluster does not exist.
  if (first || changed || request.response_nonce().empty()) type->answer = true;
  if (request.response_nonce().empty()) type->send_all = true;
}

void XdsSession::OnSnapshot(std::shared_ptr<const XdsSnapshot> snapshot) {
  // The server may hand a new stream the snapshot it read at admission after the publisher has
  // already given it a newer one: the newer stays.
  if (!snapshot || (snapshot_ && snapshot->version < snapshot_->version)) return;
  snapshot_ = std::move(snapshot);
}

std::optional<XdsSession::Response> XdsSession::Next() {
  if (!snapshot_) return std::nullopt;
  for (auto& t : types_) {
    Type& type = *t;
    if (!type.requested) continue;
    Held current;
    const auto hold = [&](std::string_view name) {
      if (auto bytes = snapshot_->Find(type.url, name)) current.emplace(name, std::move(bytes));
    };
    if (type.wildcard) {
      for (const auto& [name, resources] : snapshot_->services) hold(name);
    } else {
      for (const std::string& name : type.names) hold(name);
    }
    // What this response holds: all of `current`, or -- where the protocol allows -- what the
    // client does not have yet.
    std::vector<const Held::value_type*> send;
    for (const auto& entry : current) {
      if (type.partial && !type.send_all) {
        auto had = type.sent.find(entry.first);
        if (had != type.sent.end() && SameBytes(had->second, entry.second)) continue;
      }
      send.push_back(&entry);
    }
    const bool changed = type.partial ? !send.empty() : !SameResources(current, type.sent);
    if (!type.answer && !changed) continue;
    Response response;
    response.set_version_info(std::to_string(snapshot_->version));
    response.set_type_url(std::string(type.url));
    for (const Held::value_type* entry : send) {
      auto* any = response.add_resources();
      any->set_type_url(std::string(type.url));
      any->set_value(*entry->second);
    }
    type.last_nonce = std::to_string(++nonce_);
    response.set_nonce(type.last_nonce);
    type.sent = std::move(current);
    type.answer = false;
    type.send_all = false;
    return response;
  }
  return std::nullopt;
}

}  // namespace drover::registry
