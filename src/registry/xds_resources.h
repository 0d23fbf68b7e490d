// xDS for proxyless gRPC clients (issue 24, gRFC A27): what the registry's xDS server
// (xds_server.h) says, as pure code with no gRPC in it -- the resources made from the registry's
// instances, and one ADS stream's state-of-the-world protocol.
//
// Resources, per service S that has had an instance since the server started:
//   Listener S            an API listener whose HttpConnectionManager carries the route
//                         configuration inline and the router filter (the one filter gRPC needs)
//   RouteConfiguration S  one virtual host, domains "*", every path to cluster S (also served on
//                         its own by RDS, for a client that asks)
//   Cluster S             type EDS over ADS (service_name S), round robin
//   ClusterLoadAssignment S
//                         READY and accepting instances as HEALTHY, DRAINING ones as DRAINING,
//                         the rest left out; grouped by zone into localities whose weight is the
//                         sum of their HEALTHY instances' weights (what the zone can take now;
//                         gRPC ignores a locality without one); endpoint weight = the instance's
//                         weight (carried; gRPC 1.51's round robin does not use it). Only IP
//                         literals can be
//                         endpoints (gRPC does not resolve names in EDS; a name would make it
//                         refuse the whole assignment), so an instance registered by DNS name is
//                         left out.
// A service whose instances have all gone keeps its listener and cluster with an empty
// assignment: its clients wait for endpoints instead of failing on "resource does not exist"
// while a single-instance service restarts.
//
// The stream (XdsSession), per type: the client's subscription (resource names; a first request
// naming none, or "*", for Listener or Cluster is every one -- the wildcard; a later empty list is
// an unsubscribe), what was last sent, and the nonce of that
// response. A request answers with the current resources when it is the type's first, when its
// subscription changed, or -- after a snapshot -- when what it is subscribed to changed. Listener
// and Cluster responses hold every resource subscribed to (a client takes one left out as gone);
// RouteConfiguration and ClusterLoadAssignment responses, where the protocol lets a left-out
// resource mean "unchanged", hold only what the client does not have yet -- a new name, a changed
// resource -- except in answer to a request without a nonce, which gets them all: one service's
// endpoints changing sends that one assignment, not every assignment the client follows; a name
// a request leaves out counts as no longer held (the client dropped it), stale nonce or not. What
// was sent is kept as shared pointers into the snapshots, never as copies. A
// request that carries an older nonce than the type's last response is stale and ignored (the
// ACK of the newer response will say what the client wants); a NACK (error_detail) is logged
// once and never answered with the same resources again -- only a later change is sent, so a
// client that refuses something is not fed it in a loop. Versions are the snapshot's number;
// nonces count per stream.
//
// Thread-compatible: XdsSession is used under its stream's lock; snapshots are immutable and
// shared.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "registry/model.h"

namespace envoy::service::discovery::v3 {
class DiscoveryRequest;
class DiscoveryResponse;
}  // namespace envoy::service::discovery::v3

namespace drover::registry {

inline constexpr std::string_view kListenerType =
    "type.googleapis.com/envoy.config.listener.v3.Listener";
inline constexpr std::string_view kRouteType =
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
inline constexpr std::string_view kClusterType =
    "type.googleapis.com/envoy.config.cluster.v3.Cluster";
inline constexpr std::string_view kEndpointType =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

// One service's four resources, serialized.
struct XdsServiceResources {
  std::string listener;
  std::string route;
  std::string cluster;
  std::string endpoints;
};

// Builds them from every instance of `service` (any state; the rules above choose).
XdsServiceResources BuildXdsResources(const std::string& service,
                                      const std::vector<Instance>& instances);

// The registry as xDS sees it at one moment. Immutable once published.
struct XdsSnapshot {
  std::uint64_t version = 0;
  std::map<std::string, std::shared_ptr<const XdsServiceResources>, std::less<>> services;

  // The serialized resource of `type_url` named `name`, or null. It shares the ownership of the
  // service's resources (no copy), so a stream can keep what it sent for as long as it needs.
  std::shared_ptr<const std::string> Find(std::string_view type_url, std::string_view name) const;
};

class XdsSession {
 public:
  using Request = envoy::service::discovery::v3::DiscoveryRequest;
  using Response = envoy::service::discovery::v3::DiscoveryResponse;

  // `peer`: the client's address, for log lines.
  explicit XdsSession(std::string peer);
  ~XdsSession();
  XdsSession(const XdsSession&) = delete;
  XdsSession& operator=(const XdsSession&) = delete;

  void OnRequest(const Request& request);
  // Null until the server has read the registry once: nothing is answered before, so no client
  // is told that a listener it asks for does not exist while the server is still starting.
  void OnSnapshot(std::shared_ptr<const XdsSnapshot> snapshot);
  // The next response the client should get (one type at a time), or nothing.
  std::optional<Response> Next();

  const std::string& node_id() const { return node_id_; }
  std::uint64_t nacks() const { return nacks_; }

 private:
  struct Type;
  Type* Find(std::string_view type_url);

  std::string peer_;
  std::string node_id_;
  std::shared_ptr<const XdsSnapshot> snapshot_;
  std::vector<std::unique_ptr<Type>> types_;  // Listener, Cluster, ClusterLoadAssignment, Route
  std::uint64_t nonce_ = 0;
  std::uint64_t nacks_ = 0;
  std::set<std::string, std::less<>> unknown_types_logged_;
};

}  // namespace drover::registry
