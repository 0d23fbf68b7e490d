// The xDS v3 subset in proto/envoy (and google.rpc.Status): full names, type URLs and field
// numbers as upstream publishes them (envoyproxy/data-plane-api, googleapis), the ADS method
// path, and a Listener carrying an HttpConnectionManager through a wire round trip.
#include <google/protobuf/any.pb.h>
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <string>

#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/core/v3/core.pb.h"
#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/config/route/v3/route.pb.h"
#include "envoy/extensions/filters/http/router/v3/router.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "envoy/service/discovery/v3/ads.pb.h"
#include "google/rpc/status.pb.h"

namespace drover::registry {
namespace {

namespace core = envoy::config::core::v3;
namespace endpoint = envoy::config::endpoint::v3;
namespace cluster = envoy::config::cluster::v3;
namespace route = envoy::config::route::v3;
namespace listener = envoy::config::listener::v3;
namespace hcm = envoy::extensions::filters::network::http_connection_manager::v3;
namespace router = envoy::extensions::filters::http::router::v3;
namespace discovery = envoy::service::discovery::v3;

using google::protobuf::Descriptor;

// The number of `field` in `message`, or -1 when the message has no such field.
int FieldNumber(const Descriptor* message, const std::string& field) {
  const auto* f = message->FindFieldByName(field);
  return f == nullptr ? -1 : f->number();
}

TEST(XdsProtoTest, FullNamesAreUpstreams) {
  EXPECT_EQ(core::Locality::descriptor()->full_name(), "envoy.config.core.v3.Locality");
  EXPECT_EQ(core::Node::descriptor()->full_name(), "envoy.config.core.v3.Node");
  EXPECT_EQ(core::SocketAddress::descriptor()->full_name(), "envoy.config.core.v3.SocketAddress");
  EXPECT_EQ(core::Address::descriptor()->full_name(), "envoy.config.core.v3.Address");
  EXPECT_EQ(core::HealthStatus_descriptor()->full_name(), "envoy.config.core.v3.HealthStatus");
  EXPECT_EQ(core::AggregatedConfigSource::descriptor()->full_name(),
            "envoy.config.core.v3.AggregatedConfigSource");
  EXPECT_EQ(core::ApiVersion_descriptor()->full_name(), "envoy.config.core.v3.ApiVersion");
  EXPECT_EQ(core::ConfigSource::descriptor()->full_name(), "envoy.config.core.v3.ConfigSource");
  EXPECT_EQ(endpoint::Endpoint::descriptor()->full_name(), "envoy.config.endpoint.v3.Endpoint");
  EXPECT_EQ(endpoint::LbEndpoint::descriptor()->full_name(), "envoy.config.endpoint.v3.LbEndpoint");
  EXPECT_EQ(endpoint::LocalityLbEndpoints::descriptor()->full_name(),
            "envoy.config.endpoint.v3.LocalityLbEndpoints");
  EXPECT_EQ(endpoint::ClusterLoadAssignment::descriptor()->full_name(),
            "envoy.config.endpoint.v3.ClusterLoadAssignment");
  EXPECT_EQ(cluster::Cluster::descriptor()->full_name(), "envoy.config.cluster.v3.Cluster");
  EXPECT_EQ(cluster::Cluster::EdsClusterConfig::descriptor()->full_name(),
            "envoy.config.cluster.v3.Cluster.EdsClusterConfig");
  EXPECT_EQ(route::RouteConfiguration::descriptor()->full_name(),
            "envoy.config.route.v3.RouteConfiguration");
  EXPECT_EQ(route::VirtualHost::descriptor()->full_name(), "envoy.config.route.v3.VirtualHost");
  EXPECT_EQ(route::Route::descriptor()->full_name(), "envoy.config.route.v3.Route");
  EXPECT_EQ(route::RouteMatch::descriptor()->full_name(), "envoy.config.route.v3.RouteMatch");
  EXPECT_EQ(route::RouteAction::descriptor()->full_name(), "envoy.config.route.v3.RouteAction");
  EXPECT_EQ(listener::Listener::descriptor()->full_name(), "envoy.config.listener.v3.Listener");
  EXPECT_EQ(listener::ApiListener::descriptor()->full_name(),
            "envoy.config.listener.v3.ApiListener");
  EXPECT_EQ(hcm::HttpConnectionManager::descriptor()->full_name(),
            "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager");
  EXPECT_EQ(hcm::Rds::descriptor()->full_name(),
            "envoy.extensions.filters.network.http_connection_manager.v3.Rds");
  EXPECT_EQ(hcm::HttpFilter::descriptor()->full_name(),
            "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter");
  EXPECT_EQ(router::Router::descriptor()->full_name(),
            "envoy.extensions.filters.http.router.v3.Router");
  EXPECT_EQ(discovery::DiscoveryRequest::descriptor()->full_name(),
            "envoy.service.discovery.v3.DiscoveryRequest");
  EXPECT_EQ(discovery::DiscoveryResponse::descriptor()->full_name(),
            "envoy.service.discovery.v3.DiscoveryResponse");
  EXPECT_EQ(google::rpc::Status::descriptor()->full_name(), "google.rpc.Status");
}

TEST(XdsProtoTest, TypeUrlsAreTheOnesClientsAskFor) {
  google::protobuf::Any any;
  any.PackFrom(listener::Listener());
  EXPECT_EQ(any.type_url(), "type.googleapis.com/envoy.config.listener.v3.Listener");
  any.PackFrom(route::RouteConfiguration());
  EXPECT_EQ(any.type_url(), "type.googleapis.com/envoy.config.route.v3.RouteConfiguration");
  any.PackFrom(cluster::Cluster());
  EXPECT_EQ(any.type_url(), "type.googleapis.com/envoy.config.cluster.v3.Cluster");
  any.PackFrom(endpoint::ClusterLoadAssignment());
  EXPECT_EQ(any.type_url(), "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment");
}

TEST(XdsProtoTest, FieldNumbersAreUpstreams) {
  EXPECT_EQ(FieldNumber(core::Node::descriptor(), "user_agent_version"), 7);
  EXPECT_EQ(FieldNumber(core::Node::descriptor(), "client_features"), 10);
  EXPECT_EQ(FieldNumber(core::SocketAddress::descriptor(), "port_value"), 3);
  EXPECT_EQ(FieldNumber(core::ConfigSource::descriptor(), "ads"), 3);
  EXPECT_EQ(FieldNumber(core::ConfigSource::descriptor(), "resource_api_version"), 6);
  EXPECT_EQ(FieldNumber(endpoint::Endpoint::descriptor(), "hostname"), 3);
  EXPECT_EQ(FieldNumber(endpoint::LbEndpoint::descriptor(), "load_balancing_weight"), 4);
  EXPECT_EQ(FieldNumber(endpoint::LocalityLbEndpoints::descriptor(), "priority"), 5);
  EXPECT_EQ(FieldNumber(cluster::Cluster::descriptor(), "eds_cluster_config"), 3);
  EXPECT_EQ(FieldNumber(cluster::Cluster::descriptor(), "lb_policy"), 6);
  EXPECT_EQ(FieldNumber(route::Route::descriptor(), "name"), 14);
  EXPECT_EQ(FieldNumber(listener::Listener::descriptor(), "api_listener"), 19);
  EXPECT_EQ(FieldNumber(hcm::HttpConnectionManager::descriptor(), "route_config"), 4);
  EXPECT_EQ(FieldNumber(hcm::HttpConnectionManager::descriptor(), "http_filters"), 5);
  EXPECT_EQ(FieldNumber(hcm::HttpFilter::descriptor(), "typed_config"), 4);
  EXPECT_EQ(FieldNumber(hcm::HttpFilter::descriptor(), "is_optional"), 6);
  EXPECT_EQ(FieldNumber(discovery::DiscoveryRequest::descriptor(), "error_detail"), 6);
  EXPECT_EQ(FieldNumber(discovery::DiscoveryResponse::descriptor(), "nonce"), 5);
  EXPECT_EQ(FieldNumber(google::rpc::Status::descriptor(), "details"), 3);

  // Enum values, the reserved gap in LbPolicy included.
  EXPECT_EQ(cluster::Cluster::EDS, 3);
  EXPECT_EQ(cluster::Cluster::MAGLEV, 5);
  EXPECT_EQ(cluster::Cluster::LOAD_BALANCING_POLICY_CONFIG, 7);
  EXPECT_EQ(cluster::Cluster::LbPolicy_descriptor()->FindValueByNumber(4), nullptr);
  EXPECT_EQ(core::DEGRADED, 5);
  EXPECT_EQ(core::V3, 2);
}

TEST(XdsProtoTest, WireTagsAreUpstreams) {
  // Field 19, length-delimited: tag (19 << 3 | 2) = 154, a two-byte varint.
  listener::Listener with_api_listener;
  with_api_listener.mutable_api_listener();
  EXPECT_EQ(with_api_listener.SerializeAsString(), std::string("\x9a\x01\x00", 3));
  discovery::DiscoveryResponse with_nonce;
  with_nonce.set_nonce("n");
  EXPECT_EQ(with_nonce.SerializeAsString(), std::string("\x2a\x01n", 3));
}

TEST(XdsProtoTest, AdsMethodPath) {
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      "envoy.service.discovery.v3.AggregatedDiscoveryService");
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(service->method_count(), 1);
  EXPECT_EQ("/" + service->full_name() + "/" + service->method(0)->name(),
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources");
  EXPECT_TRUE(service->method(0)->client_streaming());
  EXPECT_TRUE(service->method(0)->server_streaming());
  // The generated gRPC service's name, the first part of the path its methods are routed on.
  EXPECT_EQ(std::string(discovery::AggregatedDiscoveryService::service_full_name()),
            "envoy.service.discovery.v3.AggregatedDiscoveryService");
}

TEST(XdsProtoTest, ListenerWithInlineRoutesRoundTrips) {
  hcm::HttpConnectionManager manager;
  manager.set_stat_prefix("drover");
  auto* routes = manager.mutable_route_config();
  routes->set_name("whoami");
  auto* host = routes->add_virtual_hosts();
  host->set_name("whoami");
  host->add_domains("whoami");
  auto* r = host->add_routes();
  r->mutable_match()->set_prefix("");
  r->mutable_route()->set_cluster("drover:whoami");
  auto* filter = manager.add_http_filters();
  filter->set_name("envoy.filters.http.router");
  filter->mutable_typed_config()->PackFrom(router::Router());

  listener::Listener sent;
  sent.set_name("whoami");
  sent.mutable_api_listener()->mutable_api_listener()->PackFrom(manager);
  EXPECT_EQ(sent.api_listener().api_listener().type_url(),
            "type.googleapis.com/"
            "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager");

  std::string wire;
  ASSERT_TRUE(sent.SerializeToString(&wire));
  listener::Listener received;
  ASSERT_TRUE(received.ParseFromString(wire));
  EXPECT_EQ(received.name(), "whoami");

  hcm::HttpConnectionManager unpacked;
  ASSERT_TRUE(received.api_listener().api_listener().UnpackTo(&unpacked));
  EXPECT_EQ(unpacked.SerializeAsString(), manager.SerializeAsString());
  EXPECT_EQ(unpacked.stat_prefix(), "drover");
  ASSERT_EQ(unpacked.route_specifier_case(), hcm::HttpConnectionManager::kRouteConfig);
  ASSERT_EQ(unpacked.route_config().virtual_hosts_size(), 1);
  const auto& got_host = unpacked.route_config().virtual_hosts(0);
  ASSERT_EQ(got_host.domains_size(), 1);
  EXPECT_EQ(got_host.domains(0), "whoami");
  ASSERT_EQ(got_host.routes_size(), 1);
  EXPECT_EQ(got_host.routes(0).match().path_specifier_case(), route::RouteMatch::kPrefix);
  EXPECT_EQ(got_host.routes(0).route().cluster(), "drover:whoami");
  ASSERT_EQ(unpacked.http_filters_size(), 1);
  EXPECT_EQ(unpacked.http_filters(0).name(), "envoy.filters.http.router");
  EXPECT_TRUE(unpacked.http_filters(0).typed_config().Is<router::Router>());
  router::Router unpacked_router;
  EXPECT_TRUE(unpacked.http_filters(0).typed_config().UnpackTo(&unpacked_router));
}

}  // namespace
}  // namespace drover::registry
