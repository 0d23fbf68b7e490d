// xDS resources and one ADS stream's protocol (xds_resources.h), without gRPC: what a proxyless
// gRPC client is given, and how requests, ACKs, NACKs and snapshots turn into responses.
#include <gtest/gtest.h>
#include <malloc.h>

#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/config/route/v3/route.pb.h"
#include "envoy/extensions/filters/http/router/v3/router.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "envoy/service/discovery/v3/ads.pb.h"
#include "registry/xds_resources.h"

namespace drover::registry {
namespace {

namespace core = envoy::config::core::v3;
namespace endpoint = envoy::config::endpoint::v3;
namespace hcm = envoy::extensions::filters::network::http_connection_manager::v3;
using envoy::config::cluster::v3::Cluster;
using envoy::config::listener::v3::Listener;
using envoy::service::discovery::v3::DiscoveryRequest;
using envoy::service::discovery::v3::DiscoveryResponse;

Instance Make(const std::string& id, const std::string& address, InstanceState state,
              std::uint32_t weight = 1, const std::string& zone = "", bool accepting = true) {
  Instance in;
  in.service = "whoami";
  in.id = id;
  in.spec.address = address;
  in.spec.state = state;
  in.spec.weight = weight;
  in.spec.zone = zone;
  in.spec.accepting = accepting;
  return in;
}

TEST(XdsResourcesTest, TheFourResourcesAreWhatAProxylessClientNeeds) {
  const XdsServiceResources r = BuildXdsResources(
      "whoami", {Make("a", "10.0.0.1:50051", InstanceState::kReady, 3, "eu-1"),
                 Make("b", "10.0.0.2:50051", InstanceState::kReady, 2, "eu-1"),
                 Make("c", "[fd00::3]:50051", InstanceState::kDraining, 5, "eu-2"),
                 Make("d", "10.0.0.4:50051", InstanceState::kStarting),
                 Make("e", "10.0.0.5:50051", InstanceState::kReady, 1, "eu-1", /*accepting=*/false),
                 Make("f", "host.example:50051", InstanceState::kReady)});

  Listener listener;
  ASSERT_TRUE(listener.ParseFromString(r.listener));
  EXPECT_EQ(listener.name(), "whoami");
  hcm::HttpConnectionManager manager;
  ASSERT_TRUE(listener.api_listener().api_listener().UnpackTo(&manager));
  ASSERT_TRUE(manager.has_route_config());
  const auto& host = manager.route_config().virtual_hosts(0);
  EXPECT_EQ(host.domains(0), "*");
  EXPECT_EQ(host.routes(0).match().prefix(), "");
  EXPECT_EQ(host.routes(0).route().cluster(), "whoami");
  ASSERT_EQ(manager.http_filters_size(), 1);
  EXPECT_EQ(manager.http_filters(0).name(), "envoy.filters.http.router");
  EXPECT_TRUE(manager.http_filters(0)
                  .typed_config()
                  .Is<envoy::extensions::filters::http::router::v3::Router>());

  Cluster cluster;
  ASSERT_TRUE(cluster.ParseFromString(r.cluster));
  EXPECT_EQ(cluster.name(), "whoami");
  EXPECT_EQ(cluster.type(), Cluster::EDS);
  EXPECT_TRUE(cluster.eds_cluster_config().eds_config().has_ads());
  EXPECT_EQ(cluster.eds_cluster_config().service_name(), "whoami");
  EXPECT_EQ(cluster.lb_policy(), Cluster::ROUND_ROBIN);

  endpoint::ClusterLoadAssignment cla;
  ASSERT_TRUE(cla.ParseFromString(r.endpoints));
  EXPECT_EQ(cla.cluster_name(), "whoami");
  ASSERT_EQ(cla.endpoints_size(), 2);  // zones eu-1, eu-2; STARTING, not accepting, names: out
  const auto& eu1 = cla.endpoints(0);
  EXPECT_EQ(eu1.locality().zone(), "eu-1");
  EXPECT_EQ(eu1.load_balancing_weight().value(), 5u);  // 3 + 2
  ASSERT_EQ(eu1.lb_endpoints_size(), 2);
  EXPECT_EQ(eu1.lb_endpoints(0).endpoint().address().socket_address().address(), "10.0.0.1");
  EXPECT_EQ(eu1.lb_endpoints(0).endpoint().address().socket_address().port_value(), 50051u);
  EXPECT_EQ(eu1.lb_endpoints(0).health_status(), core::HEALTHY);
  EXPECT_EQ(eu1.lb_endpoints(0).load_balancing_weight().value(), 3u);
  const auto& eu2 = cla.endpoints(1);
  EXPECT_EQ(eu2.locality().zone(), "eu-2");
  EXPECT_EQ(eu2.lb_endpoints(0).endpoint().address().socket_address().address(), "fd00::3");
  EXPECT_EQ(eu2.lb_endpoints(0).health_status(), core::DRAINING);
  EXPECT_EQ(eu2.load_balancing_weight().value(), 0u);  // nothing there can take a call now
}

std::shared_ptr<const XdsSnapshot> Snapshot(std::uint64_t version,
                                            std::map<std::string, std::vector<Instance>> services) {
  auto s = std::make_shared<XdsSnapshot>();
  s->version = version;
  for (auto& [name, instances] : services) {
    s->services[name] =
        std::make_shared<const XdsServiceResources>(BuildXdsResources(name, instances));
  }
  return s;
}

DiscoveryRequest Ask(std::string_view type, std::vector<std::string> names,
                     const std::string& nonce = "", const std::string& version = "") {
  DiscoveryRequest r;
  r.set_type_url(std::string(type));
  for (auto& n : names) r.add_resource_names(n);
  r.set_response_nonce(nonce);
  r.set_version_info(version);
  r.mutable_node()->set_id("node-1");
  return r;
}

std::vector<std::string> Names(const DiscoveryResponse& response) {
  std::vector<std::string> names;
  for (const auto& any : response.resources()) {
    if (any.Is<Listener>()) {
      Listener l;
      any.UnpackTo(&l);
      names.push_back(l.name());
    } else if (any.Is<endpoint::ClusterLoadAssignment>()) {
      endpoint::ClusterLoadAssignment c;
      any.UnpackTo(&c);
      names.push_back(c.cluster_name());
    } else if (any.Is<Cluster>()) {
      Cluster c;
      any.UnpackTo(&c);
      names.push_back(c.name());
    }
  }
  return names;
}

TEST(XdsSessionTest, NothingIsAnsweredBeforeTheFirstSnapshot) {
  XdsSession s("peer");
  s.OnRequest(Ask(kListenerType, {"whoami"}));
  EXPECT_FALSE(s.Next().has_value());
  s.OnSnapshot(Snapshot(1, {{"whoami", {Make("a", "10.0.0.1:1", InstanceState::kReady)}}}));
  auto r = s.Next();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->type_url(), kListenerType);
  EXPECT_EQ(r->version_info(), "1");
  EXPECT_EQ(Names(*r), std::vector<std::string>{"whoami"});
  EXPECT_EQ(s.node_id(), "node-1");
}

TEST(XdsSessionTest, AnOlderSnapshotNeverReplacesANewerOne) {
  XdsSession s("peer");
  s.OnSnapshot(Snapshot(2, {{"whoami", {Make("a", "10.0.0.1:1", InstanceState::kReady)}}}));
  s.OnSnapshot(Snapshot(1, {}));  // what the server read at admission, handed over late
  s.OnSnapshot(nullptr);
  s.OnRequest(Ask(kListenerType, {"whoami"}));
  auto r = s.Next();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->version_info(), "2");
  EXPECT_EQ(Names(*r), std::vector<std::string>{"whoami"});
}

TEST(XdsSessionTest, AcksAreQuietAndChangesArePushedToSubscribersOnly) {
  XdsSession s("peer");
  s.OnSnapshot(Snapshot(1, {{"whoami", {Make("a", "10.0.0.1:1", InstanceState::kReady)}},
                            {"other", {Make("o", "10.0.1.1:1", InstanceState::kReady)}}}));
  s.OnRequest(Ask(kEndpointType, {"whoami"}));
  auto first = s.Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(Names(*first), std::vector<std::string>{"whoami"});
  EXPECT_FALSE(s.Next().has_value());
  s.OnRequest(Ask(kEndpointType, {"whoami"}, first->nonce(), first->version_info()));  // ACK
  EXPECT_FALSE(s.Next().has_value());

  // Only "other" changed: nothing for this client.
  s.OnSnapshot(Snapshot(2, {{"whoami", {Make("a", "10.0.0.1:1", InstanceState::kReady)}},
                            {"other", {Make("o", "10.0.1.2:1", InstanceState::kReady)}}}));
  EXPECT_FALSE(s.Next().has_value());
  // "whoami" changed (a DRAINING): pushed.
  s.OnSnapshot(Snapshot(3, {{"whoami", {Make("a", "10.0.0.1:1", InstanceState::kDraining)}},
                            {"other", {Make("o", "10.0.1.2:1", InstanceState::kReady)}}}));
  auto push = s.Next();
  ASSERT_TRUE(push.has_value());
  EXPECT_EQ(push->version_info(), "3");
  EXPECT_NE(push->nonce(), first->nonce());
  endpoint::ClusterLoadAssignment cla;
  ASSERT_TRUE(push->resources(0).UnpackTo(&cla));
  EXPECT_EQ(cla.endpoints(0).lb_endpoints(0).health_status(), core::DRAINING);
}

// Endpoints and routes: a response holds what the client does not have yet; listeners and
// clusters: every one subscribed to, always.
TEST(XdsSessionTest, AssignmentsAreSentOnlyWhenNewOrChangedListenersAndClustersAlwaysAll) {
  XdsSession s("peer");
  const auto snapshot = [](std::uint64_t version, const std::string& a_address,
                           const std::string& b_address) {
    return Snapshot(version, {{"a", {Make("x", a_address, InstanceState::kReady)}},
                              {"b", {Make("y", b_address, InstanceState::kReady)}}});
  };
  s.OnSnapshot(snapshot(1, "10.0.0.1:1", "10.0.0.2:1"));
  s.OnRequest(Ask(kEndpointType, {"a", "b"}));
  auto first = s.Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(Names(*first), (std::vector<std::string>{"a", "b"}));
  s.OnRequest(Ask(kEndpointType, {"a", "b"}, first->nonce(), "1"));  // ACK
  s.OnRequest(Ask(kClusterType, {}));
  auto clusters = s.Next();
  ASSERT_TRUE(clusters.has_value());
  s.OnRequest(Ask(kClusterType, {}, clusters->nonce(), "1"));  // ACK
  EXPECT_FALSE(s.Next().has_value());

  // b's endpoints change: its assignment alone.
  s.OnSnapshot(snapshot(2, "10.0.0.1:1", "10.0.0.3:1"));
  auto push = s.Next();
  ASSERT_TRUE(push.has_value());
  EXPECT_EQ(push->type_url(), kEndpointType);
  EXPECT_EQ(push->version_info(), "2");
  EXPECT_EQ(Names(*push), std::vector<std::string>{"b"});
  EXPECT_FALSE(s.Next().has_value());                               // the clusters did not change
  s.OnRequest(Ask(kEndpointType, {"a", "b"}, push->nonce(), "2"));  // ACK
  EXPECT_FALSE(s.Next().has_value());

  // A new name: its assignment alone.
  s.OnSnapshot(Snapshot(3, {{"a", {Make("x", "10.0.0.1:1", InstanceState::kReady)}},
                            {"b", {Make("y", "10.0.0.3:1", InstanceState::kReady)}},
                            {"c", {Make("z", "10.0.0.4:1", InstanceState::kReady)}}}));
  auto cluster_push = s.Next();  // a cluster was added: every cluster
  ASSERT_TRUE(cluster_push.has_value());
  EXPECT_EQ(cluster_push->type_url(), kClusterType);
  EXPECT_EQ(Names(*cluster_push), (std::vector<std::string>{"a", "b", "c"}));
  s.OnRequest(Ask(kEndpointType, {"a", "b", "c"}, push->nonce(), "3"));
  auto added = s.Next();
  ASSERT_TRUE(added.has_value());
  EXPECT_EQ(Names(*added), std::vector<std::string>{"c"});

  // Unsubscribing from b and subscribing to it again: sent again (the client dropped it).
  s.OnRequest(Ask(kEndpointType, {"a", "c"}, added->nonce(), "3"));
  auto dropped = s.Next();
  ASSERT_TRUE(dropped.has_value());
  EXPECT_EQ(dropped->resources_size(), 0);
  s.OnRequest(Ask(kEndpointType, {"a", "b", "c"}, dropped->nonce(), "3"));
  auto again = s.Next();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(Names(*again), std::vector<std::string>{"b"});

  // A request without a nonce gets everything it asks for.
  s.OnRequest(Ask(kEndpointType, {"a", "b", "c"}));
  auto all = s.Next();
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(Names(*all), (std::vector<std::string>{"a", "b", "c"}));
}

// What a stream sent is kept as pointers into the snapshots: a hundred streams following a
// hundred services of 200 endpoints each hold a small part of those resources' size, not a copy
// each (a copy was ~650 KB per stream here).
TEST(XdsSessionTest, AStreamKeepsNoCopyOfWhatItSent) {
  std::map<std::string, std::vector<Instance>> services;
  for (int k = 0; k < 100; ++k) {
    auto& members = services["svc" + std::to_string(k)];
    for (int i = 0; i < 200; ++i) {
      members.push_back(
          Make("i" + std::to_string(i),
               "10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":1",
               InstanceState::kReady, 1, "z" + std::to_string(i % 3)));
    }
  }
  const auto snapshot = Snapshot(1, services);
  std::size_t resource_bytes = 0;
  std::vector<std::string> names;
  for (const auto& [name, r] : snapshot->services) {
    resource_bytes +=
        r->listener.size() + r->route.size() + r->cluster.size() + r->endpoints.size();
    names.push_back(name);
  }
  const std::size_t before = ::mallinfo2().uordblks;
  std::vector<std::unique_ptr<XdsSession>> sessions;
  for (int i = 0; i < 100; ++i) {
    auto s = std::make_unique<XdsSession>("peer");
    s->OnSnapshot(snapshot);
    s->OnRequest(Ask(kListenerType, {}));
    s->OnRequest(Ask(kClusterType, {}));
    s->OnRequest(Ask(kEndpointType, names));
    int responses = 0;
    while (s->Next()) ++responses;
    ASSERT_EQ(responses, 3);
    sessions.push_back(std::move(s));
  }
  const std::size_t per_session = (::mallinfo2().uordblks - before) / sessions.size();
  std::printf("%zu B of resources; %zu B of heap per stream\n", resource_bytes, per_session);
  EXPECT_LT(per_session, resource_bytes / 8);  // 0 under a sanitizer's allocator: no figure
}

// A client that drops an assignment has deleted it; asking for it again gets it again, even when
// both requests arrive before the stream's next response (a write was under way), or when they
// carry a stale nonce.
TEST(XdsSessionTest, AnAssignmentDroppedAndAskedForAgainIsSentAgain) {
  XdsSession s("peer");
  s.OnSnapshot(Snapshot(1, {{"a", {Make("x", "10.0.0.1:1", InstanceState::kReady)}},
                            {"b", {Make("y", "10.0.0.2:1", InstanceState::kReady)}}}));
  s.OnRequest(Ask(kEndpointType, {"a", "b"}));
  auto first = s.Next();
  ASSERT_TRUE(first.has_value());
  s.OnRequest(Ask(kEndpointType, {"a"}, first->nonce(), "1"));       // drops b
  s.OnRequest(Ask(kEndpointType, {"a", "b"}, first->nonce(), "1"));  // and wants it back
  auto again = s.Next();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(Names(*again), std::vector<std::string>{"b"});

  // The same with stale nonces (a newer response is on its way): ignored as requests, but the
  // drop is remembered, so b goes out again.
  s.OnSnapshot(Snapshot(2, {{"a", {Make("x", "10.0.0.3:1", InstanceState::kReady)}},
                            {"b", {Make("y", "10.0.0.2:1", InstanceState::kReady)}}}));
  auto push = s.Next();
  ASSERT_TRUE(push.has_value());
  EXPECT_EQ(Names(*push), std::vector<std::string>{"a"});
  s.OnRequest(Ask(kEndpointType, {"a"}, again->nonce(), "1"));       // stale: answers `again`
  s.OnRequest(Ask(kEndpointType, {"a", "b"}, again->nonce(), "1"));  // stale too
  auto resent = s.Next();
  ASSERT_TRUE(resent.has_value());
  EXPECT_EQ(Names(*resent), std::vector<std::string>{"b"});
  s.OnRequest(Ask(kEndpointType, {"a", "b"}, resent->nonce(), "2"));  // ACK
  EXPECT_FALSE(s.Next().has_value());
}

TEST(XdsSessionTest, ANackIsNotAnsweredWithTheSameResourcesAgain) {
  XdsSession s("peer");
  s.OnSnapshot(Snapshot(1, {{"whoami", {Make("a", "10.0.0.1:1", InstanceState::kReady)}}}));
  s.OnRequest(Ask(kClusterType, {"whoami"}));
  auto sent = s.Next();
  ASSERT_TRUE(sent.has_value());
  DiscoveryRequest nack = Ask(kClusterType, {"whoami"}, sent->nonce(), "");
  nack.mutable_error_detail()->set_code(3);
  nack.mutable_error_detail()->set_message("cluster whoami: unsupported something");
  for (int i = 0; i < 5; ++i) {
    s.OnRequest(nack);
    EXPECT_FALSE(s.Next().has_value()) << "resent after NACK " << i;
  }
  EXPECT_EQ(s.nacks(), 5u);
  // A later change is sent.
  s.OnSnapshot(Snapshot(2, {{"whoami",
                             {Make("a", "10.0.0.1:1", InstanceState::kReady),
                              Make("b", "10.0.0.2:1", InstanceState::kReady)}}}));
  EXPECT_FALSE(s.Next().has_value());  // the cluster resource itself did not change
  s.OnRequest(Ask(kEndpointType, {"whoami"}));
  ASSERT_TRUE(s.Next().has_value());
}

TEST(XdsSessionTest, StaleNoncesAreIgnoredAndNewNamesAnswered) {
  XdsSession s("peer");
  s.OnSnapshot(Snapshot(1, {{"a", {Make("x", "10.0.0.1:1", InstanceState::kReady)}},
                            {"b", {Make("y", "10.0.0.2:1", InstanceState::kReady)}}}));
  s.OnRequest(Ask(kListenerType, {"a"}));
  auto r1 = s.Next();
  ASSERT_TRUE(r1.has_value());
  s.OnSnapshot(Snapshot(2, {{"a", {Make("x", "10.0.0.1:2", InstanceState::kReady)}},
                            {"b", {Make("y", "10.0.0.2:1", InstanceState::kReady)}}}));
  // Unchanged listener (only endpoints moved): nothing.
  EXPECT_FALSE(s.Next().has_value());
  // The client asks for a and b, answering r1's nonce: the newest; answered with both.
  s.OnRequest(Ask(kListenerType, {"a", "b"}, r1->nonce(), "1"));
  auto r2 = s.Next();
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(Names(*r2), (std::vector<std::string>{"a", "b"}));
  // A request still carrying r1's nonce is stale now: ignored.
  s.OnRequest(Ask(kListenerType, {"a"}, r1->nonce(), "1"));
  EXPECT_FALSE(s.Next().has_value());
}

TEST(XdsSessionTest, UnknownNamesGetAnEmptyAnswerAndWildcardsGetEverything) {
  XdsSession s("peer");
  s.OnSnapshot(Snapshot(1, {{"a", {Make("x", "10.0.0.1:1", InstanceState::kReady)}},
                            {"b", {Make("y", "10.0.0.2:1", InstanceState::kReady)}}}));
  s.OnRequest(Ask(kListenerType, {"nope"}));
  auto none = s.Next();
  ASSERT_TRUE(none.has_value());  // so the client learns "nope" does not exist
  EXPECT_EQ(none->resources_size(), 0);
  s.OnRequest(Ask(kClusterType, {}));
  auto all = s.Next();
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(Names(*all), (std::vector<std::string>{"a", "b"}));
  // A later empty list is an unsubscribe, not a wildcard.
  s.OnRequest(Ask(kListenerType, {}, none->nonce(), "1"));
  auto emptied = s.Next();
  ASSERT_TRUE(emptied.has_value());
  EXPECT_EQ(emptied->resources_size(), 0);
  // A type nobody serves is not answered.
  s.OnRequest(Ask("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret", {"x"}));
  EXPECT_FALSE(s.Next().has_value());
}

}  // namespace
}  // namespace drover::registry
