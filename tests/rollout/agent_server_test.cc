// The agent's HTTP API over real loopback sockets, in front of an in-memory platform: every
// endpoint, its errors, and the deploy history surviving a restart of the server. (The real
// supervisor behind it is in supervisor_test; both together in deploy_e2e_test.)
#include "rollout/agent_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/tokens.h"
#include "rollout/fake_platform.h"
#include "testing/http_client.h"
#include "testing/temp_dir.h"

namespace drover::rollout {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;
using testing::Http;

class AgentServerTest : public ::testing::Test {
 protected:
  AgentServerTest() : platform_(clock_) {}
  void SetUp() override { Restart(); }

  void Restart() {
    server_.reset();
    auto server = AgentServer::Start(platform_, Options());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  AgentServerOptions Options(std::shared_ptr<const Authorizer> auth = nullptr) const {
    AgentServerOptions options;
    options.data_dir = dir_.path();
    options.auth = std::move(auth);
    return options;
  }

  testing::HttpReply Call(const std::string& method, const std::string& target,
                          const std::string& body = {}) {
    return Http(server_->port(), method, target, body);
  }

  static std::string ErrorCode(const testing::HttpReply& reply) {
    const json body = json::parse(reply.body, nullptr, false);
    return body.is_discarded() ? "" : body["error"].value("code", "");
  }

  RealClock clock_;
  FakePlatform platform_;
  testing::TempDir dir_;
  std::unique_ptr<AgentServer> server_;
};

const char* kLaunch =
    R"({"service":"zone","id":"zone-v1-1","version":"v1","argv":["/bin/zone","--id","{id}"]})";

TEST_F(AgentServerTest, LiveAnswers) {
  const auto live = Call("GET", "/live");
  EXPECT_EQ(live.status, 200);
  EXPECT_EQ(live.body, "live\n");
}

TEST_F(AgentServerTest, StartsListsAndStopsInstances) {
  const auto started = Call("POST", "/v1/instances", kLaunch);
  ASSERT_EQ(started.status, 200) << started.body;
  EXPECT_EQ(json::parse(started.body)["id"], "zone-v1-1");
  ASSERT_EQ(Call("POST", "/v1/instances",
                 R"({"service":"web","id":"web-1","version":"v1","argv":["/bin/web"]})")
                .status,
            200);

  const auto all = Call("GET", "/v1/instances");
  ASSERT_EQ(all.status, 200) << all.body;
  EXPECT_EQ(json::parse(all.body)["instances"].size(), 2u);
  const auto zone = Call("GET", "/v1/instances?service=zone");
  const json listed = json::parse(zone.body);
  ASSERT_EQ(listed["instances"].size(), 1u);
  const json& one = listed["instances"][0];
  EXPECT_EQ(one["id"], "zone-v1-1");
  EXPECT_EQ(one["status"], "RUNNING");
  EXPECT_EQ(one["argv"], json::array({"/bin/zone", "--id", "{id}"}));
  ASSERT_EQ(one["events"].size(), 1u);
  EXPECT_EQ(one["events"][0]["kind"], "started");
  EXPECT_GT(one["events"][0]["at_ms"].get<std::int64_t>(), 0);

  const auto stopped = Call("DELETE", "/v1/instances/zone-v1-1?grace_ms=2500");
  EXPECT_EQ(stopped.status, 200) << stopped.body;
  EXPECT_THAT(platform_.calls(),
              ElementsAre("start zone-v1-1", "start web-1", "stop zone-v1-1 2500"));
  EXPECT_THAT(platform_.ids(), ElementsAre("web-1"));
  // The default grace when none is given.
  EXPECT_EQ(Call("DELETE", "/v1/instances/web-1").status, 200);
  EXPECT_EQ(platform_.calls().back(), "stop web-1 10000");
}

TEST_F(AgentServerTest, BadRequestsGetClearErrors) {
  ASSERT_EQ(Call("POST", "/v1/instances", kLaunch).status, 200);
  const auto twice = Call("POST", "/v1/instances", kLaunch);
  EXPECT_EQ(twice.status, 409);
  EXPECT_EQ(ErrorCode(twice), "ALREADY_EXISTS");

  const auto not_json = Call("POST", "/v1/instances", "{service: zone");
  EXPECT_EQ(not_json.status, 400);
  EXPECT_THAT(not_json.body, HasSubstr("body is not JSON"));
  const auto no_argv = Call("POST", "/v1/instances", R"({"service":"zone","id":"z"})");
  EXPECT_EQ(no_argv.status, 400);
  EXPECT_THAT(no_argv.body, HasSubstr("bad launch spec"));
  const auto bad_id = Call("POST", "/v1/instances",
                           R"({"service":"zone","id":"../etc","version":"v1","argv":["x"]})");
  EXPECT_EQ(bad_id.status, 400) << bad_id.body;
  EXPECT_EQ(ErrorCode(bad_id), "INVALID_ARGUMENT");

  const auto unknown = Call("DELETE", "/v1/instances/nobody");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(ErrorCode(unknown), "NOT_FOUND");
  const auto bad_grace = Call("DELETE", "/v1/instances/zone-v1-1?grace_ms=soon");
  EXPECT_EQ(bad_grace.status, 400);
  EXPECT_THAT(bad_grace.body, HasSubstr("grace_ms must be 0..600000"));

  const auto huge = Call("POST", "/v1/instances", std::string(70 * 1024, 'x'));
  EXPECT_EQ(huge.status, 413);
  EXPECT_EQ(ErrorCode(huge), "RESOURCE_EXHAUSTED");
  EXPECT_THAT(huge.body, HasSubstr("body larger than 65536 bytes"));
  EXPECT_EQ(Call("GET", "/v1/nothing").status, 404);
  // A request that is not HTTP is answered, not just dropped.
  const auto garbage = testing::SendRaw(server_->port(), "HELLO AGENT\r\n\r\n");
  EXPECT_EQ(garbage.status, 400);
  EXPECT_EQ(ErrorCode(garbage), "INVALID_ARGUMENT");
  EXPECT_EQ(Call("PUT", "/v1/instances").status, 400);

  // Bytes that are not UTF-8 in a path end up in the error message: a clean 404, no crash.
  const auto binary = Call("DELETE", "/v1/instances/\xff\xfe");
  EXPECT_EQ(binary.status, 404);
  EXPECT_EQ(ErrorCode(binary), "NOT_FOUND");
  const auto binary_deploy = Call("PUT", "/v1/deploys/\xff", R"({"service":"zone"})");
  EXPECT_EQ(binary_deploy.status, 400);
  EXPECT_THAT(binary_deploy.body, HasSubstr("may only use [A-Za-z0-9._-]"));
  EXPECT_EQ(Call("GET", "/v1/deploys").status, 200);
  EXPECT_EQ(Call("GET", "/live").status, 200);

  platform_.unreachable = true;
  const auto down = Call("GET", "/v1/instances");
  EXPECT_EQ(down.status, 503);
  EXPECT_EQ(ErrorCode(down), "UNAVAILABLE");
}

TEST_F(AgentServerTest, DeployHistoryIsNewestFirstAndSurvivesARestart) {
  ASSERT_EQ(Call("PUT", "/v1/deploys/zone-v1-1",
                 R"({"service":"zone","version":"v1","verdict":"running"})")
                .status,
            200);
  ASSERT_EQ(Call("PUT", "/v1/deploys/web-v7-2", R"({"service":"web","verdict":"pass"})").status,
            200);
  // The same id again replaces its record in place.
  ASSERT_EQ(Call("PUT", "/v1/deploys/zone-v1-1",
                 R"({"service":"zone","version":"v1","verdict":"fail","reason":"crash loop"})")
                .status,
            200);
  const auto bad = Call("PUT", "/v1/deploys/x", R"({"version":"v1"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("a deploy record is a JSON object with a service"));

  Restart();
  const json all = json::parse(Call("GET", "/v1/deploys").body);
  ASSERT_EQ(all["deploys"].size(), 2u);
  EXPECT_EQ(all["deploys"][0]["service"], "web");
  EXPECT_EQ(all["deploys"][1]["verdict"], "fail");
  const json zone = json::parse(Call("GET", "/v1/deploys?service=zone").body);
  ASSERT_EQ(zone["deploys"].size(), 1u);
  EXPECT_EQ(zone["deploys"][0]["reason"], "crash loop");
}

// The registry's dashboard reads the deploy history from another origin; nothing else is opened
// to other origins: not the writes, and not the instances, whose launch specs carry argv and
// environment.
TEST_F(AgentServerTest, OnlyTheDeployHistoryAndLiveAreReadableFromOtherOrigins) {
  const std::string cors = "Access-Control-Allow-Origin: *";
  const auto put = Call("PUT", "/v1/deploys/zone-v1-1", R"({"service":"zone"})");
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_THAT(put.headers, ::testing::Not(HasSubstr(cors)));
  const auto deploys = Call("GET", "/v1/deploys?service=zone");
  ASSERT_EQ(deploys.status, 200);
  EXPECT_THAT(deploys.headers, HasSubstr(cors));
  EXPECT_THAT(Call("GET", "/live").headers, HasSubstr(cors));

  const auto started = Call("POST", "/v1/instances", kLaunch);
  ASSERT_EQ(started.status, 200) << started.body;
  EXPECT_THAT(started.headers, ::testing::Not(HasSubstr(cors)));
  const auto instances = Call("GET", "/v1/instances");
  ASSERT_EQ(instances.status, 200);
  EXPECT_THAT(instances.headers, ::testing::Not(HasSubstr(cors)));
  EXPECT_THAT(Call("DELETE", "/v1/instances/zone-v1-1").headers, ::testing::Not(HasSubstr(cors)));
}

TEST_F(AgentServerTest, ACorruptHistoryFileIsAClearStartupError) {
  server_.reset();
  std::ofstream(dir_.path() + "/deploys.json") << "[{\"service\":";
  auto server = AgentServer::Start(platform_, Options());
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("deploys.json"));
}

// Tokens: reading needs a known one; starting, stopping and recording a deploy of a service need
// one whose `deploy` list names it -- a registry `write` token is not enough.
TEST_F(AgentServerTest, WithTokensEveryCallButLiveNeedsOneAndChangesNeedDeployRights) {
  auto auth = Authorizer::FromYaml(R"(
tokens:
  - name: zone-deployer
    token: "deployer-token-0123456789"
    deploy: ["zone"]
  - name: zone-writer
    token: "writer-token-0123456789"
    write: ["zone"]
  - name: chat-deployer
    token: "chat-token-0123456789"
    deploy: ["chat"]
  - name: viewer
    token: "viewer-token-0123456789"
    read_only: true
)");
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  server_.reset();
  auto server = AgentServer::Start(platform_, Options(*auth));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(*server);
  const auto as = [&](const std::string& token, const std::string& method,
                      const std::string& target, const std::string& body = {}) {
    const std::string header = token.empty() ? "" : "Authorization: Bearer " + token + "\r\n";
    return testing::SendRaw(server_->port(), testing::RequestText(method, target, body, header));
  };
  const std::string record = R"({"service":"zone","version":"v1"})";

  EXPECT_EQ(Call("GET", "/live").status, 200);  // probes need no token
  for (const auto& [method, target, body] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"GET", "/v1/instances", ""},
           {"GET", "/v1/deploys", ""},
           {"POST", "/v1/instances", kLaunch},
           {"DELETE", "/v1/instances/zone-v1-1", ""},
           {"PUT", "/v1/deploys/d1", record}}) {
    SCOPED_TRACE(method + " " + target);
    const auto none = as("", method, target, body);
    EXPECT_EQ(none.status, 401);
    EXPECT_EQ(ErrorCode(none), "UNAUTHENTICATED");
    EXPECT_THAT(none.body, HasSubstr("missing 'Authorization: Bearer <token>'"));
    EXPECT_THAT(none.headers, HasSubstr("WWW-Authenticate: Bearer"));
    EXPECT_EQ(as("not-a-token-anyone-knows", method, target, body).status, 401);
  }
  EXPECT_EQ(as("viewer-token-0123456789", "GET", "/v1/instances").status, 200);
  EXPECT_EQ(as("viewer-token-0123456789", "GET", "/v1/deploys").status, 200);

  for (const char* token :
       {"viewer-token-0123456789", "writer-token-0123456789", "chat-token-0123456789"}) {
    SCOPED_TRACE(token);
    const auto start = as(token, "POST", "/v1/instances", kLaunch);
    EXPECT_EQ(start.status, 403);
    EXPECT_EQ(ErrorCode(start), "PERMISSION_DENIED");
    EXPECT_THAT(start.body, HasSubstr("may not deploy service 'zone'"));
    EXPECT_EQ(as(token, "PUT", "/v1/deploys/d1", record).status, 403);
  }
  EXPECT_TRUE(platform_.List("zone")->empty());  // nothing was started by a refused call

  ASSERT_EQ(as("deployer-token-0123456789", "POST", "/v1/instances", kLaunch).status, 200);
  EXPECT_EQ(as("deployer-token-0123456789", "PUT", "/v1/deploys/d1", record).status, 200);
  // Stopping is judged by the instance's own service.
  const auto stop = as("chat-token-0123456789", "DELETE", "/v1/instances/zone-v1-1");
  EXPECT_EQ(stop.status, 403);
  EXPECT_THAT(stop.body, HasSubstr("may not deploy service 'zone'"));
  EXPECT_EQ(as("chat-token-0123456789", "DELETE", "/v1/instances/nobody").status, 404);
  EXPECT_EQ(as("deployer-token-0123456789", "DELETE", "/v1/instances/zone-v1-1").status, 200);
  EXPECT_TRUE(platform_.List("zone")->empty());
}

}  // namespace
}  // namespace drover::rollout
