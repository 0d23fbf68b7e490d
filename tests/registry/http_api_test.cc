#include "registry/http_api.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "common/tokens.h"
#include "registry/client_limits.h"
#include "registry/gated_store.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "registry/ui_url.h"
#include "testing/eventually.h"
#include "testing/http_backend.h"
#include "testing/http_client.h"
#include "testing/temp_dir.h"

namespace drover::registry {
namespace {

using namespace std::chrono_literals;
using testing::Http;

nlohmann::json Json(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

const char* kGoodBody = R"({"address":"127.0.0.1:9001","generation":2,"state":"READY",
  "ttl_ms":5000,"weight":3,"zone":"z1","labels":{"shard":"1"},"version":"1.0","accepting":true})";

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpOptions options;
    options.max_body = 4096;
    Start(options);
  }

  void Start(const HttpOptions& options) {
    ASSERT_FALSE(dir_.path().empty());
    auto store = SqliteStore::Open(dir_.path());
    ASSERT_TRUE(store.ok());
    auto registry = Registry::Open(std::move(*store), clock_);
    ASSERT_TRUE(registry.ok());
    registry_ = std::move(*registry);
    auto server = HttpServer::Start(*registry_, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    port_ = server_->port();
  }
  void TearDown() override { server_.reset(); }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<HttpServer> server_;
  std::uint16_t port_ = 0;
};

TEST_F(HttpApiTest, RegisterListWatchOverRealSockets) {
  auto put = Http(port_, "PUT", "/v1/services/zone/instances/z1", kGoodBody);
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(Json(put.body)["revision"], 1);

  auto list = Http(port_, "GET", "/v1/services/zone/instances");
  ASSERT_EQ(list.status, 200);
  auto body = Json(list.body);
  EXPECT_EQ(body["revision"], 1);
  EXPECT_EQ(body["degraded"], false);
  ASSERT_EQ(body["instances"].size(), 1u);
  EXPECT_EQ(body["instances"][0]["state"], "READY");
  EXPECT_EQ(body["instances"][0]["labels"]["shard"], "1");
  EXPECT_EQ(body["instances"][0]["weight"], 3);

  testing::StreamReader watch(port_, "/v1/watch?from=0&service=zone");
  auto first = watch.Lines(1, 5s);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(watch.status(), 200);
  EXPECT_EQ(Json(first[0])["type"], "RESYNC");
  EXPECT_EQ(Json(first[0])["instances"].size(), 1u);

  ASSERT_EQ(Http(port_, "POST", "/v1/services/zone/instances/z1/state",
                 R"({"generation":2,"accepting":false})")
                .status,
            200);
  ASSERT_EQ(Http(port_, "DELETE", "/v1/services/zone/instances/z1?generation=2").status, 200);
  auto lines = watch.Lines(3, 5s);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(Json(lines[1])["type"], "PUT");
  EXPECT_EQ(Json(lines[1])["instance"]["accepting"], false);
  EXPECT_EQ(Json(lines[2])["type"], "DELETE");
  EXPECT_EQ(Json(lines[2])["reason"], "deregister");
  EXPECT_EQ(Json(lines[2])["revision"], 3);

  auto services = Json(Http(port_, "GET", "/v1/services").body);
  EXPECT_EQ(services["revision"], 3);
}

// One request says what every service serves: its READY instances per version.
// Every answer names the registry (the server adds the header): a write's (sent later), a
// list, a refusal, a redirect, a probe.
TEST_F(HttpApiTest, EveryAnswerNamesTheRegistry) {
  for (const auto& [method, target, body] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"PUT", "/v1/services/zone/instances/named", kGoodBody},
           {"GET", "/v1/services/zone/instances", ""},
           {"PUT", "/v1/services/zone/instances/named", "{nope"},
           {"GET", "/", ""},
           {"GET", "/ready", ""}}) {
    const auto reply = Http(port_, method, target, body);
    EXPECT_NE(reply.status, 0) << method << " " << target;
    EXPECT_NE(reply.headers.find("\r\nServer: drover-registry"), std::string::npos)
        << method << " " << target << ": " << reply.headers;
  }
}

TEST_F(HttpApiTest, TheServiceListCountsReadyInstancesPerVersion) {
  ASSERT_EQ(Http(port_, "PUT", "/v1/services/zone/instances/z1", kGoodBody).status, 200);
  ASSERT_EQ(Http(port_, "PUT", "/v1/services/zone/instances/z2",
                 R"({"address":"127.0.0.1:9002","generation":1,"state":"READY"})")
                .status,
            200);
  ASSERT_EQ(
      Http(port_, "PUT", "/v1/services/zone/instances/z3",
           R"({"address":"127.0.0.1:9003","generation":1,"state":"STARTING","version":"2.0"})")
          .status,
      200);
  const auto body = Json(Http(port_, "GET", "/v1/services").body);
  ASSERT_EQ(body["services"].size(), 1u);
  const auto& zone = body["services"][0];
  EXPECT_EQ(zone["instances"], 3);
  EXPECT_EQ(zone["ready"], 2);
  EXPECT_EQ(zone["ready_versions"], nlohmann::json({{"1.0", 1}, {"", 1}}));
}

TEST_F(HttpApiTest, ListsShowTheTimeLeftOnEachLease) {
  ASSERT_EQ(Http(port_, "PUT", "/v1/services/zone/instances/z1", kGoodBody).status, 200);
  auto lease = [&] {
    const auto body = Json(Http(port_, "GET", "/v1/services/zone/instances").body);
    return body["instances"][0].value("lease_remaining_ms", std::int64_t{-1});
  };
  EXPECT_EQ(lease(), 5000);
  clock_.Advance(2s);
  EXPECT_EQ(lease(), 3000);
  ASSERT_EQ(
      Http(port_, "POST", "/v1/services/zone/instances/z1/heartbeat", R"({"generation":2})").status,
      200);
  EXPECT_EQ(lease(), 5000);
  clock_.Advance(7s);  // lapsed; Tick() has not expired it yet
  EXPECT_EQ(lease(), 0);
}

TEST_F(HttpApiTest, HeartbeatAndFencing) {
  ASSERT_EQ(Http(port_, "PUT", "/v1/services/zone/instances/z1", kGoodBody).status, 200);
  EXPECT_EQ(
      Http(port_, "POST", "/v1/services/zone/instances/z1/heartbeat", R"({"generation":2})").status,
      200);
  auto fenced =
      Http(port_, "POST", "/v1/services/zone/instances/z1/heartbeat", R"({"generation":1})");
  EXPECT_EQ(fenced.status, 409);
  EXPECT_EQ(Json(fenced.body)["error"]["code"], "FENCED");
  EXPECT_EQ(Json(fenced.body)["error"]["newest_generation"], 2);
  auto missing =
      Http(port_, "POST", "/v1/services/zone/instances/nobody/heartbeat", R"({"generation":1})");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Json(missing.body)["error"]["code"], "NOT_FOUND");
}

// A registry on SQLite whose commits wait for the test (GatedStore), served over HTTP by one io
// thread: whatever would make that thread wait for the store shows as a request not answered.
struct GatedServer {
  void Start() {
    registry = OpenGatedRegistry(dir.path(), clock, gated);
    ASSERT_NE(registry, nullptr);
    HttpOptions options;
    options.threads = 1;
    auto started = HttpServer::Start(*registry, options);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server = std::move(*started);
  }
  ~GatedServer() { server.reset(); }  // before the registry

  testing::TempDir dir;
  FakeClock clock;
  GatedStore* gated = nullptr;
  std::unique_ptr<Registry> registry;
  std::unique_ptr<HttpServer> server;
};

// An instance write is answered once its commit is durable, and no io thread waits for that: with
// the server's one thread and the store's commits held, reads are answered and more writes queue;
// once the commits go, each write gets its revision. Refusals found after a write queued come back
// the same way.
TEST(HttpWriteTest, WritesWaitingForTheirCommitHoldNoThreadAndAreAnsweredOnceItIsDone) {
  GatedServer g;
  ASSERT_NO_FATAL_FAILURE(g.Start());
  GatedStore& gated = *g.gated;
  const std::uint16_t port = g.server->port();

  testing::HttpReply first, second;
  std::jthread a([&] { first = Http(port, "PUT", "/v1/services/zone/instances/a", kGoodBody); });
  ASSERT_TRUE(testing::Eventually([&] { return !gated.batches().empty(); }, 10s));
  std::jthread b([&] { second = Http(port, "PUT", "/v1/services/zone/instances/b", kGoodBody); });
  ASSERT_TRUE(testing::Eventually([&] { return g.registry->commit_counters().waiting == 1; }, 10s));
  const auto list = Http(port, "GET", "/v1/services/zone/instances");
  EXPECT_EQ(list.status, 200);
  EXPECT_TRUE(Json(list.body)["instances"].empty()) << list.body;  // nothing committed yet
  EXPECT_EQ(Http(port, "GET", "/ready").status, 200);

  gated.Open();
  a.join();
  b.join();
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_LT(Json(first.body)["revision"].get<std::uint64_t>(),
            Json(second.body)["revision"].get<std::uint64_t>());
  EXPECT_EQ(Json(Http(port, "GET", "/v1/services/zone/instances").body)["instances"].size(), 2u);

  const auto fenced = Http(port, "POST", "/v1/services/zone/instances/a/state",
                           R"({"generation":1,"state":"DRAINING"})");
  EXPECT_EQ(fenced.status, 409);
  EXPECT_EQ(Json(fenced.body)["error"]["code"], "FENCED");
  EXPECT_EQ(Http(port, "DELETE", "/v1/services/zone/instances/nobody?generation=1").status, 404);
  const auto drained = Http(port, "POST", "/v1/services/zone/instances/a/state",
                            R"({"generation":2,"state":"DRAINING"})");
  EXPECT_EQ(drained.status, 200);
  EXPECT_GT(Json(drained.body)["revision"].get<std::uint64_t>(),
            Json(second.body)["revision"].get<std::uint64_t>());
  EXPECT_EQ(Http(port, "DELETE", "/v1/services/zone/instances/b?generation=2").status, 200);
}

// A deploy record read or written while the writer holds the store (a commit in progress) waits
// on the registry's deploy thread, not on the server's only io thread: probes, lists and a
// second deploy request are answered meanwhile, and the waiting ones once the commit is done.
TEST(HttpWriteTest, DeployRequestsWaitingForTheStoreHoldNoThread) {
  GatedServer g;
  ASSERT_NO_FATAL_FAILURE(g.Start());
  GatedStore& gated = *g.gated;
  const std::uint16_t port = g.server->port();

  testing::HttpReply registered, put, got;
  std::jthread writer(
      [&] { registered = Http(port, "PUT", "/v1/services/zone/instances/a", kGoodBody); });
  ASSERT_TRUE(testing::Eventually([&] { return !gated.batches().empty(); }, 10s));
  // The writer now holds the store until the gate opens.
  const std::string record =
      R"({"expect_version":0,"active":true,"record":{"service":"zone","verdict":"running"}})";
  std::jthread deployer([&] { put = Http(port, "PUT", "/v1/deploys/zone-v1-1", record); });
  std::jthread reader([&] { got = Http(port, "GET", "/v1/deploys?service=zone"); });
  std::atomic<bool> probed{false};
  std::jthread probe([&] {
    EXPECT_EQ(Http(port, "GET", "/ready").status, 200);
    EXPECT_EQ(Http(port, "GET", "/v1/services/zone/instances").status, 200);
    probed = true;
  });
  const bool answered_meanwhile = testing::Eventually([&] { return probed.load(); }, 5s);
  EXPECT_TRUE(answered_meanwhile) << "the io thread waited for the store";
  EXPECT_EQ(put.status, 0);  // still waiting
  EXPECT_EQ(got.status, 0);

  gated.Open();
  writer.join();
  deployer.join();
  reader.join();
  probe.join();
  ASSERT_EQ(registered.status, 200) << registered.body;
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(Json(put.body)["version"], 1);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_LE(Json(got.body)["deploys"].size(), 1u);  // queued after the PUT or before it
  // The answers of the store come back as before: found, missing, a version conflict.
  const auto read = Http(port, "GET", "/v1/deploys/zone-v1-1");
  ASSERT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(Json(read.body)["record"]["verdict"], "running");
  EXPECT_EQ(Http(port, "GET", "/v1/deploys/nope").status, 404);
  const auto stale = Http(port, "PUT", "/v1/deploys/zone-v1-1", record);
  EXPECT_EQ(stale.status, 409) << stale.body;
  EXPECT_EQ(Json(stale.body)["error"]["code"], "ABORTED");
}

TEST_F(HttpApiTest, MalformedRequestsGet4xxAndChangeNothing) {
  ASSERT_EQ(Http(port_, "PUT", "/v1/services/zone/instances/z1", kGoodBody).status, 200);
  const std::string before = Http(port_, "GET", "/v1/services/zone/instances").body;
  struct Case {
    const char* name;
    std::string method, target, body;
    int status;
  };
  const std::vector<Case> cases = {
      {"not json", "PUT", "/v1/services/zone/instances/z2", "{nope", 400},
      {"array body", "PUT", "/v1/services/zone/instances/z2", "[1,2]", 400},
      {"empty body", "PUT", "/v1/services/zone/instances/z2", "", 400},
      {"missing address", "PUT", "/v1/services/zone/instances/z2", R"({"generation":1})", 400},
      {"missing generation", "PUT", "/v1/services/zone/instances/z2", R"({"address":"a:1"})", 400},
      {"generation string", "PUT", "/v1/services/zone/instances/z2",
       R"({"address":"a:1","generation":"1"})", 400},
      {"negative generation", "PUT", "/v1/services/zone/instances/z2",
       R"({"address":"a:1","generation":-1})", 400},
      {"unknown field", "PUT", "/v1/services/zone/instances/z2",
       R"({"address":"a:1","generation":1,"colour":"red"})", 400},
      {"bad state", "PUT", "/v1/services/zone/instances/z2",
       R"({"address":"a:1","generation":1,"state":"ready"})", 400},
      {"labels not strings", "PUT", "/v1/services/zone/instances/z2",
       R"({"address":"a:1","generation":1,"labels":{"a":1}})", 400},
      {"accepting not bool", "PUT", "/v1/services/zone/instances/z2",
       R"({"address":"a:1","generation":1,"accepting":"yes"})", 400},
      {"bad port", "PUT", "/v1/services/zone/instances/z2",
       R"({"address":"a:70000","generation":1})", 400},
      {"ttl too small", "PUT", "/v1/services/zone/instances/z2",
       R"({"address":"a:1","generation":1,"ttl_ms":1})", 400},
      {"bad service name", "PUT", "/v1/services/zo%20ne/instances/z2",
       R"({"address":"a:1","generation":1})", 400},
      {"id too long", "PUT", "/v1/services/zone/instances/" + std::string(200, 'x'),
       R"({"address":"a:1","generation":1})", 400},
      {"heartbeat no generation", "POST", "/v1/services/zone/instances/z1/heartbeat", "{}", 400},
      {"heartbeat extra field", "POST", "/v1/services/zone/instances/z1/heartbeat",
       R"({"generation":2,"x":1})", 400},
      {"state without change", "POST", "/v1/services/zone/instances/z1/state",
       R"({"generation":2})", 400},
      {"state bad value", "POST", "/v1/services/zone/instances/z1/state",
       R"({"generation":2,"state":"GONE"})", 400},
      {"delete without generation", "DELETE", "/v1/services/zone/instances/z1", "", 400},
      {"delete bad generation", "DELETE", "/v1/services/zone/instances/z1?generation=x", "", 400},
      {"watch bad from", "GET", "/v1/watch?from=abc", "", 400},
      {"watch from the future", "GET", "/v1/watch?from=999", "", 400},
      {"unknown action", "POST", "/v1/services/zone/instances/z1/explode", "{}", 404},
      {"unknown endpoint", "GET", "/v2/everything", "", 404},
      {"wrong method", "POST", "/v1/services", "", 405},
      {"oversized body", "PUT", "/v1/services/zone/instances/z2",
       R"({"address":"a:1","generation":1,"version":")" + std::string(10000, 'v') + "\"}", 413},
  };
  ASSERT_GE(cases.size(), 20u);
  for (const Case& c : cases) {
    auto reply = Http(port_, c.method, c.target, c.body);
    EXPECT_EQ(reply.status, c.status) << c.name << ": " << reply.body;
    EXPECT_TRUE(Json(reply.body).contains("error")) << c.name << ": " << reply.body;
  }
  // A method the path does not take: 405 with UNIMPLEMENTED (nothing is wrong with the content)
  // and an Allow header.
  for (const auto& [method, target, allowed] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/v1/services", "GET"},
           {"PATCH", "/v1/services/zone/instances/z1", "PUT, DELETE"},
           {"GET", "/v1/services/zone/instances/z1/heartbeat", "POST"},
           {"DELETE", "/v1/deploys", "GET"}}) {
    auto reply = Http(port_, method, target, "");
    EXPECT_EQ(reply.status, 405) << method << " " << target;
    EXPECT_EQ(Json(reply.body)["error"]["code"], "UNIMPLEMENTED") << reply.body;
    EXPECT_NE(reply.headers.find("Allow: " + allowed + "\r\n"), std::string::npos)
        << method << " " << target << "\n"
        << reply.headers;
  }
  // A request line that is not HTTP at all.
  EXPECT_EQ(testing::SendRaw(port_, "HELLO\r\n\r\n").status, 400);
  EXPECT_EQ(Http(port_, "GET", "/v1/services/zone/instances").body, before);
  EXPECT_EQ(registry_->revision(), 1u);
}

TEST_F(HttpApiTest, InvalidUtf8InThePathGetsAClearError) {
  auto reply = Http(port_, "GET", "/v2/\xff\xfe");
  EXPECT_EQ(reply.status, 404);
  EXPECT_TRUE(Json(reply.body).contains("error")) << reply.body;
  auto action = Http(port_, "POST", "/v1/services/zone/instances/b/\xff", "{}");
  EXPECT_EQ(action.status, 404);
}

TEST_F(HttpApiTest, HealthAndMetrics) {
  EXPECT_EQ(Http(port_, "GET", "/live").status, 200);
  EXPECT_EQ(Json(Http(port_, "GET", "/ready").body)["status"], "ready");
  ASSERT_EQ(Http(port_, "PUT", "/v1/services/zone/instances/z1", kGoodBody).status, 200);
  auto metrics = Http(port_, "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.headers.find("text/plain"), std::string::npos);
  EXPECT_NE(metrics.body.find("drover_registry_revision 1\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("drover_registry_instances{service=\"zone\"} 1\n"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("drover_registry_http_responses_total{code=\"200\"}"),
            std::string::npos);
}

// GET /v1/prometheus/sd: what Prometheus' http_sd_configs reads. One target group per READY and
// accepting instance, its labels the instance's own.
TEST_F(HttpApiTest, PrometheusDiscoveryOffersReadyAcceptingInstancesWithTheirLabels) {
  auto empty = Http(port_, "GET", "/v1/prometheus/sd");
  ASSERT_EQ(empty.status, 200) << empty.body;
  EXPECT_NE(empty.headers.find("Content-Type: application/json"), std::string::npos);
  EXPECT_EQ(Json(empty.body), nlohmann::json::array());

  auto put = [&](const std::string& service, const std::string& id, const std::string& body) {
    const auto reply = Http(port_, "PUT", "/v1/services/" + service + "/instances/" + id, body);
    ASSERT_EQ(reply.status, 200) << id << ": " << reply.body;
  };
  put("zone", "z1", R"({"address":"127.0.0.1:9001","generation":1,"state":"READY","zone":"eu-1",
    "version":"1.2","labels":{"drover.metrics":"127.0.0.1:9101","shard":"7","team-name":"x"}})");
  put("zone", "z2", R"({"address":"127.0.0.1:9002","generation":1,"state":"READY"})");
  put("zone", "starting", R"({"address":"127.0.0.1:9003","generation":1,"state":"STARTING"})");
  put("zone", "paused",
      R"({"address":"127.0.0.1:9004","generation":1,"state":"READY","accepting":false})");
  put("zone", "leaving", R"({"address":"127.0.0.1:9005","generation":1,"state":"DRAINING"})");
  put("chat", "c1", R"({"address":"127.0.0.1:9201","generation":1,"state":"READY"})");

  // Group by instance id; every group holds exactly one target.
  auto groups = [&](const std::string& target) {
    const auto reply = Http(port_, "GET", target);
    EXPECT_EQ(reply.status, 200) << reply.body;
    std::map<std::string, nlohmann::json> by_id;
    for (const auto& g : Json(reply.body)) {
      by_id[g.at("labels").at("__meta_drover_instance").get<std::string>()] = g;
    }
    return by_id;
  };
  const auto all = groups("/v1/prometheus/sd");
  ASSERT_EQ(all.size(), 3u) << Http(port_, "GET", "/v1/prometheus/sd").body;
  // The target is the drover.metrics label when there is one; key characters outside
  // [a-zA-Z0-9_] become '_'.
  EXPECT_EQ(all.at("z1"), nlohmann::json::parse(R"({"targets":["127.0.0.1:9101"],"labels":{
      "__meta_drover_service":"zone","__meta_drover_instance":"z1","__meta_drover_zone":"eu-1",
      "__meta_drover_version":"1.2","__meta_drover_state":"READY",
      "__meta_drover_address":"127.0.0.1:9001","__meta_drover_label_drover_metrics":"127.0.0.1:9101",
      "__meta_drover_label_shard":"7","__meta_drover_label_team_name":"x"}})"));
  // Else the instance's own address.
  EXPECT_EQ(all.at("z2")["targets"], nlohmann::json::array({"127.0.0.1:9002"}));
  EXPECT_EQ(all.at("z2")["labels"]["__meta_drover_zone"], "");
  EXPECT_EQ(all.at("c1")["labels"]["__meta_drover_service"], "chat");

  const auto zone = groups("/v1/prometheus/sd?service=zone");
  EXPECT_EQ(zone.size(), 2u);
  EXPECT_TRUE(zone.contains("z1") && zone.contains("z2"));
  EXPECT_EQ(groups("/v1/prometheus/sd?service=chat").size(), 1u);
  // An unknown service has no targets: an empty list, not an error.
  const auto unknown = Http(port_, "GET", "/v1/prometheus/sd?service=nobody");
  EXPECT_EQ(unknown.status, 200);
  EXPECT_EQ(Json(unknown.body), nlohmann::json::array());

  for (const std::string bad :
       {"/v1/prometheus/sd?service=bad!name", "/v1/prometheus/sd?service="}) {
    const auto reply = Http(port_, "GET", bad);
    EXPECT_EQ(reply.status, 400) << bad;
    EXPECT_EQ(Json(reply.body)["error"]["code"], "INVALID_ARGUMENT") << reply.body;
  }
  EXPECT_EQ(Http(port_, "POST", "/v1/prometheus/sd").status, 405);

  // Leaving: once DRAINING (or gone) an instance is no target any more.
  ASSERT_EQ(Http(port_, "POST", "/v1/services/zone/instances/z2/state",
                 R"({"generation":1,"state":"DRAINING"})")
                .status,
            200);
  ASSERT_EQ(Http(port_, "DELETE", "/v1/services/chat/instances/c1?generation=1").status, 200);
  const auto after = groups("/v1/prometheus/sd");
  EXPECT_EQ(after.size(), 1u);
  EXPECT_TRUE(after.contains("z1"));
}

// The server's protection limits, each with its own options.
class HttpLimitsTest : public HttpApiTest {
 protected:
  void SetUp() override {}

  // A keep-alive connection that has been served once (so the server counts it as open).
  int OpenServedConnection() {
    const int fd = testing::ConnectLoopback(port_);
    if (fd < 0 || !testing::SendAll(fd, "GET /live HTTP/1.1\r\nHost: t\r\n\r\n")) return -1;
    pollfd p{fd, POLLIN, 0};
    char buf[1024];
    if (::poll(&p, 1, 5000) <= 0 || ::recv(fd, buf, sizeof buf, 0) <= 0) return -1;
    return std::string_view(buf, 12) == "HTTP/1.1 200" ? fd : -1;
  }
};

TEST_F(HttpLimitsTest, ConnectionsOverTheLimitGet503AndTheServerKeepsServing) {
  HttpOptions options;
  options.max_connections = 2;
  Start(options);
  const int a = OpenServedConnection();
  const int b = OpenServedConnection();
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  auto refused = Http(port_, "GET", "/v1/services");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_NE(refused.body.find("too many connections"), std::string::npos) << refused.body;
  ::close(a);
  // The slot is free once the server has seen the close.
  EXPECT_TRUE(
      testing::Eventually([&] { return Http(port_, "GET", "/v1/services").status == 200; }, 5s));
  ::close(b);
  // Answered once the server has seen a close (until then the two slots may still be taken: b,
  // or the last connection of the wait above, which the client closed after its answer).
  std::string metrics;
  ASSERT_TRUE(testing::Eventually(
      [&] {
        const auto got = Http(port_, "GET", "/metrics");
        metrics = got.body;
        return got.status == 200;
      },
      5s))
      << metrics;
  EXPECT_NE(metrics.find("drover_registry_http_refused_connections_total "), std::string::npos);
  EXPECT_EQ(metrics.find("drover_registry_http_refused_connections_total 0"), std::string::npos)
      << metrics;
}

// Two tokens; "writer" may write the zone service.
std::shared_ptr<const Authorizer> TwoTokens() {
  return Authorizer::FromYaml(R"(
tokens:
  - name: writer
    token: "writer-token-0123456789"
    write: ["zone"]
  - name: other
    token: "other-token-0123456789"
)")
      .value();
}
const std::string kWriter = "Authorization: Bearer writer-token-0123456789\r\n";
const std::string kOther = "Authorization: Bearer other-token-0123456789\r\n";

// With tokens, limits count per token -- not per address: every stream here comes from
// 127.0.0.1, and the other token's stream is served while the first token is at its limit.
TEST_F(HttpLimitsTest, WatchStreamsOverTheLimitPerTokenGet429WhileOtherTokensGoOn) {
  HttpOptions options;
  options.auth = TwoTokens();
  options.limits = std::make_shared<ClientLimits>(ClientLimitOptions{.max_watches_per_client = 2});
  Start(options);
  auto first = std::make_unique<testing::StreamReader>(port_, "/v1/watch?from=0", kWriter);
  testing::StreamReader second(port_, "/v1/watch?from=0", kWriter);
  ASSERT_EQ(first->Lines(1, 5s).size(), 1u);
  ASSERT_EQ(second.Lines(1, 5s).size(), 1u);
  testing::StreamReader third(port_, "/v1/watch?from=0", kWriter);
  EXPECT_TRUE(third.Ended(5s));
  EXPECT_EQ(third.status(), 429);
  testing::StreamReader other(port_, "/v1/watch?from=0", kOther);
  EXPECT_EQ(other.Lines(1, 5s).size(), 1u);
  EXPECT_EQ(other.status(), 200);
  // Everything else is still served, writes and their events included.
  ASSERT_EQ(testing::SendRaw(port_, testing::RequestText("PUT", "/v1/services/zone/instances/z1",
                                                         kGoodBody, kWriter))
                .status,
            200);
  EXPECT_EQ(second.Lines(2, 5s).size(), 2u);
  // A stream whose client went away ends when the server next writes to it (an event, or the
  // periodic progress): then its slot is free again.
  first.reset();
  int n = 0;
  EXPECT_TRUE(testing::Eventually(
      [&] {
        testing::SendRaw(port_, testing::RequestText(
                                    "PUT", "/v1/services/zone/instances/e" + std::to_string(++n),
                                    kGoodBody, kWriter));
        testing::StreamReader again(port_, "/v1/watch?from=0", kWriter);
        return again.Lines(1, 1s).size() == 1u && again.status() == 200;
      },
      10s));
}

// Without tokens a client is a connection (an HTTP watch holds its own), and the registry's cap
// over every client is what stops a flood of them.
TEST_F(HttpLimitsTest, WithoutTokensTheCapOverEveryClientRefusesWatchStreamsBeyondIt) {
  HttpOptions options;
  options.limits = std::make_shared<ClientLimits>(ClientLimitOptions{.max_watches = 2});
  Start(options);
  testing::StreamReader first(port_, "/v1/watch?from=0");
  testing::StreamReader second(port_, "/v1/watch?from=0");
  ASSERT_EQ(first.Lines(1, 5s).size(), 1u);
  ASSERT_EQ(second.Lines(1, 5s).size(), 1u);
  testing::StreamReader third(port_, "/v1/watch?from=0");
  EXPECT_TRUE(third.Ended(5s));
  EXPECT_EQ(third.status(), 429);
}

// The fleet's case: a gateway with a hundred routes behind one address and one token watches
// every one of them, with the default limits.
TEST_F(HttpLimitsTest, AHundredWatchStreamsFromOneAddressWithOneTokenAreAllServed) {
  HttpOptions options;
  options.auth = TwoTokens();
  Start(options);
  std::vector<std::unique_ptr<testing::StreamReader>> streams;
  for (int i = 0; i < 100; ++i) {
    streams.push_back(std::make_unique<testing::StreamReader>(
        port_, "/v1/watch?service=route" + std::to_string(i) + "&from=0", kWriter));
  }
  int served = 0;
  for (auto& stream : streams) served += stream->Lines(1, 5s).size() == 1u ? 1 : 0;
  EXPECT_EQ(served, 100);
  for (auto& stream : streams) EXPECT_EQ(stream->status(), 200);
}

TEST_F(HttpLimitsTest, WritesOverTheRatePerTokenGet429WhileReadsGoOn) {
  HttpOptions options;
  options.auth = TwoTokens();
  // A token every 50 ms.
  options.limits =
      std::make_shared<ClientLimits>(ClientLimitOptions{.write_rate = 20, .write_burst = 3});
  Start(options);
  auto put = [&](const std::string& id) {
    return testing::SendRaw(port_, testing::RequestText("PUT", "/v1/services/zone/instances/" + id,
                                                        kGoodBody, kWriter));
  };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(put("z" + std::to_string(i)).status, 200);
  auto limited = put("z9");
  EXPECT_EQ(limited.status, 429) << limited.body;
  EXPECT_EQ(Json(limited.body)["error"]["code"], "RESOURCE_EXHAUSTED") << limited.body;
  EXPECT_NE(limited.body.find("write rate limit: 20 writes/s per token"), std::string::npos)
      << limited.body;
  EXPECT_EQ(testing::SendRaw(port_,
                             testing::RequestText("GET", "/v1/services/zone/instances", "", kOther))
                .status,
            200);  // reads go on
  EXPECT_TRUE(testing::Eventually([&] { return put("z9").status == 200; }, 5s));
  EXPECT_NE(testing::SendRaw(port_, testing::RequestText("GET", "/metrics", "", kOther))
                .body.find("drover_registry_rate_limited_writes_total"),
            std::string::npos);
}

// The fleet's parts through the registry: only drover-gateway and drover-agent, only registered
// ones, only their fixed read path; the first ask starts the fetch, the next gets the answer.
TEST_F(HttpApiTest, FleetPartsAreReadThroughTheRegistry) {
  testing::HttpBackend gateway("gw-1");
  EXPECT_EQ(Http(port_, "GET", "/v1/fleet/zone/z1").status, 400);  // not a fleet part
  EXPECT_EQ(Http(port_, "GET", "/v1/fleet/drover-gateway/gw-1").status, 404);
  ASSERT_EQ(Http(port_, "PUT", "/v1/services/drover-gateway/instances/gw-1",
                 R"({"address":")" + gateway.address() +
                     R"(","generation":1,"state":"READY","ttl_ms":600000,)"
                     R"("labels":{"scheme":"http"}})")
                .status,
            200);
  testing::HttpReply reply;
  ASSERT_TRUE(testing::Eventually(
      [&] {
        reply = Http(port_, "GET", "/v1/fleet/drover-gateway/gw-1");
        return reply.status == 200;
      },
      5s, 50ms))
      << reply.status << " " << reply.body;
  EXPECT_EQ(reply.body, "gw-1 GET /admin/snapshot");  // the fixed path, the body as it came
  EXPECT_NE(reply.headers.find("X-Drover-Age-Ms: "), std::string::npos) << reply.headers;
  EXPECT_EQ(Http(port_, "POST", "/v1/fleet/drover-gateway/gw-1").status, 405);
  // Gone from the registry: no longer fetched.
  ASSERT_EQ(Http(port_, "DELETE", "/v1/services/drover-gateway/instances/gw-1?generation=1").status,
            200);
  EXPECT_EQ(Http(port_, "GET", "/v1/fleet/drover-gateway/gw-1").status, 404);
}

TEST_F(HttpApiTest, StopEndsOpenWatchStreams) {
  testing::StreamReader watch(port_, "/v1/watch?from=0");
  ASSERT_EQ(watch.Lines(1, 5s).size(), 1u);
  server_->Stop();
  server_->Stop();                                   // idempotent
  EXPECT_TRUE(watch.Ended(5s));                      // the stream was closed, not left hanging
  EXPECT_EQ(Http(port_, "GET", "/live").status, 0);  // nothing listens any more
}

TEST_F(HttpApiTest, ServesTheDashboard) {
  for (const char* path : {"/", "/ui"}) {
    const auto redirect = Http(port_, "GET", path);
    EXPECT_EQ(redirect.status, 302) << path;
    EXPECT_NE(redirect.headers.find("Location: /ui/\r\n"), std::string::npos) << redirect.headers;
  }
  const auto index = Http(port_, "GET", "/ui/");
  ASSERT_EQ(index.status, 200);
  EXPECT_NE(index.headers.find("Content-Type: text/html; charset=utf-8"), std::string::npos);
  EXPECT_NE(index.headers.find("Cache-Control: no-cache"), std::string::npos);
  EXPECT_NE(index.headers.find("Content-Security-Policy: default-src 'self'"), std::string::npos);
  EXPECT_NE(index.body.find("<script src=\"app.js\""), std::string::npos);
  EXPECT_EQ(Http(port_, "GET", "/ui/index.html").body, index.body);

  const std::map<std::string, std::string> types = {{"app.js", "text/javascript; charset=utf-8"},
                                                    {"style.css", "text/css; charset=utf-8"}};
  for (const auto& [file, type] : types) {
    const auto reply = Http(port_, "GET", "/ui/" + file);
    ASSERT_EQ(reply.status, 200) << file;
    EXPECT_NE(reply.headers.find("Content-Type: " + type + "\r\n"), std::string::npos)
        << reply.headers;
    EXPECT_NE(reply.headers.find("X-Content-Type-Options: nosniff"), std::string::npos);
    EXPECT_FALSE(reply.body.empty());
    // Revalidation: the same ETag means 304 and no body; HEAD has GET's length and no body.
    const std::size_t at = reply.headers.find("ETag: ");
    ASSERT_NE(at, std::string::npos) << reply.headers;
    const std::string etag = reply.headers.substr(at + 6, reply.headers.find('\r', at) - at - 6);
    const auto again = testing::SendRaw(
        port_, testing::RequestText("GET", "/ui/" + file, "", "If-None-Match: " + etag + "\r\n"));
    EXPECT_EQ(again.status, 304) << again.headers;
    EXPECT_TRUE(again.body.empty());
    const auto head = Http(port_, "HEAD", "/ui/" + file);
    EXPECT_EQ(head.status, 200);
    EXPECT_NE(head.headers.find("Content-Length: " + std::to_string(reply.body.size())),
              std::string::npos)
        << head.headers;
    EXPECT_TRUE(head.body.empty());
  }
  EXPECT_EQ(Http(port_, "GET", "/ui/missing.js").status, 404);
  EXPECT_EQ(Http(port_, "GET", "/ui/../v1/services").status, 404);
  EXPECT_EQ(Http(port_, "POST", "/ui/").status, 405);

  const auto config = Http(port_, "GET", "/ui/config.json");
  ASSERT_EQ(config.status, 200);
  EXPECT_NE(config.headers.find("Cache-Control: no-store"), std::string::npos);
  EXPECT_EQ(Json(config.body), Json(R"({"gateways":[],"agents":[]})"));
}

TEST_F(HttpApiTest, ConfigJsonListsTheGatewaysAndAgentsGiven) {
  server_.reset();
  registry_.reset();  // Start() opens the data directory again
  HttpOptions options;
  options.ui_gateways = {"http://127.0.0.1:9900/", "https://gw-2.example:9900"};
  options.ui_agents = {"http://[::1]:7080"};
  Start(options);
  const auto config = Http(port_, "GET", "/ui/config.json");
  ASSERT_EQ(config.status, 200);
  EXPECT_EQ(Json(config.body),
            Json(R"({"gateways":["http://127.0.0.1:9900","https://gw-2.example:9900"],)"
                 R"("agents":["http://[::1]:7080"]})"));

  for (const char* bad : {"127.0.0.1:9900", "ftp://gw:1", "http://", "http://gw:1/admin",
                          "http://user@gw:1", "http://gw:1?x=1", "http://g w:1"}) {
    EXPECT_FALSE(ValidateUiUrl(bad).ok()) << bad;
    HttpOptions refused;
    refused.ui_agents = {bad};
    auto server = HttpServer::Start(*registry_, refused);
    ASSERT_FALSE(server.ok()) << bad;
    EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
  }
}

class HttpAuthTest : public HttpApiTest {
 protected:
  void SetUp() override {
    auto auth = Authorizer::FromYaml(R"(
tokens:
  - name: zone-servers
    token: "zone-token-0123456789"
    write: ["zone"]
  - name: admin
    token: "admin-token-0123456789"
    write: ["*"]
  - name: dashboard
    token: "read-token-0123456789"
    read_only: true
  - name: zone-deployer
    token: "deploy-token-0123456789"
    deploy: ["zone"]
)");
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    HttpOptions options;
    options.auth = *auth;
    Start(options);
  }

  testing::HttpReply As(const std::string& token, const std::string& method,
                        const std::string& target, const std::string& body = {}) {
    return testing::SendRaw(port_, testing::RequestText(method, target, body,
                                                        "Authorization: Bearer " + token + "\r\n"));
  }
};

TEST_F(HttpAuthTest, TokensGateReadsAndPerServiceWrites) {
  const std::string body = R"({"address":"127.0.0.1:1","generation":1})";
  auto anonymous = Http(port_, "PUT", "/v1/services/zone/instances/a", body);
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_NE(anonymous.headers.find("WWW-Authenticate: Bearer"), std::string::npos);
  EXPECT_EQ(As("wrong-token-0123456789", "GET", "/v1/services").status, 401);
  EXPECT_EQ(Http(port_, "GET", "/v1/watch?from=0").status, 401);

  EXPECT_EQ(As("zone-token-0123456789", "PUT", "/v1/services/zone/instances/a", body).status, 200);
  // A token writing a service it does not own.
  auto denied = As("zone-token-0123456789", "PUT", "/v1/services/chat/instances/a", body);
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(Json(denied.body)["error"]["code"], "PERMISSION_DENIED");
  EXPECT_EQ(
      As("zone-token-0123456789", "DELETE", "/v1/services/chat/instances/a?generation=1").status,
      403);
  EXPECT_EQ(As("read-token-0123456789", "POST", "/v1/services/zone/instances/a/heartbeat",
               R"({"generation":1})")
                .status,
            403);
  EXPECT_EQ(As("admin-token-0123456789", "PUT", "/v1/services/chat/instances/a", body).status, 200);

  // Every valid token reads; health endpoints stay open for probes.
  auto list = As("read-token-0123456789", "GET", "/v1/services/zone/instances");
  EXPECT_EQ(list.status, 200);
  EXPECT_EQ(Json(list.body)["instances"].size(), 1u);
  EXPECT_EQ(Http(port_, "GET", "/live").status, 200);
  EXPECT_EQ(registry_->revision(), 2u);  // the denied writes changed nothing

  // The dashboard's files hold no data and load without a token (the page then asks for one);
  // where the gateways and agents are is behind it.
  EXPECT_EQ(Http(port_, "GET", "/ui/").status, 200);
  EXPECT_EQ(Http(port_, "GET", "/ui/app.js").status, 200);
  EXPECT_EQ(Http(port_, "GET", "/ui/config.json").status, 401);
  EXPECT_EQ(As("read-token-0123456789", "GET", "/ui/config.json").status, 200);
}

// Prometheus' discovery reads like any client: with a token (http_sd_configs' `authorization`).
TEST_F(HttpAuthTest, PrometheusDiscoveryNeedsAToken) {
  ASSERT_EQ(As("zone-token-0123456789", "PUT", "/v1/services/zone/instances/b",
               R"({"address":"127.0.0.1:2","generation":1,"state":"READY"})")
                .status,
            200);
  auto sd = Http(port_, "GET", "/v1/prometheus/sd");
  EXPECT_EQ(sd.status, 401);
  EXPECT_NE(sd.headers.find("WWW-Authenticate: Bearer"), std::string::npos);
  EXPECT_EQ(As("wrong-token-0123456789", "GET", "/v1/prometheus/sd?service=zone").status, 401);
  auto targets = As("read-token-0123456789", "GET", "/v1/prometheus/sd?service=zone");
  EXPECT_EQ(targets.status, 200);
  EXPECT_EQ(Json(targets.body).size(), 1u) << targets.body;
}

// Deploy records: any token reads them; writing one needs the deploy right for its service,
// which a registry write token does not give.
TEST_F(HttpAuthTest, DeployRecordsNeedTheDeployRightToWrite) {
  const std::string record =
      R"({"expect_version":0,"active":true,"record":{"service":"zone","verdict":"running"}})";
  EXPECT_EQ(Http(port_, "PUT", "/v1/deploys/zone-v1-1", record).status, 401);
  const auto writer = As("admin-token-0123456789", "PUT", "/v1/deploys/zone-v1-1", record);
  EXPECT_EQ(writer.status, 403);
  EXPECT_NE(writer.body.find("may not deploy service 'zone'"), std::string::npos) << writer.body;
  const auto stored = As("deploy-token-0123456789", "PUT", "/v1/deploys/zone-v1-1", record);
  ASSERT_EQ(stored.status, 200) << stored.body;
  EXPECT_EQ(Json(stored.body)["version"], 1);
  const auto read = As("read-token-0123456789", "GET", "/v1/deploys/zone-v1-1");
  ASSERT_EQ(read.status, 200);
  EXPECT_EQ(Json(read.body)["record"]["verdict"], "running");
  EXPECT_EQ(As("read-token-0123456789", "GET", "/v1/deploys/nope").status, 404);
  EXPECT_EQ(
      Json(As("read-token-0123456789", "GET", "/v1/deploys?service=zone").body)["deploys"].size(),
      1u);
  // Malformed: a record naming no service, or another service than checked.
  EXPECT_EQ(As("deploy-token-0123456789", "PUT", "/v1/deploys/zone-v1-2",
               R"({"expect_version":0,"record":{}})")
                .status,
            400);
  EXPECT_EQ(As("deploy-token-0123456789", "PUT", "/v1/deploys/zone-v1-1",
               R"({"expect_version":1,"record":{"service":"zone"},"colour":"red"})")
                .status,
            400);
}

}  // namespace
}  // namespace drover::registry
