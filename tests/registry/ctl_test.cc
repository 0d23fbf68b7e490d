// `drover ctl` against a real `drover registry` process: tables, JSON, exit codes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <tuple>

#include "testing/http_client.h"
#include "testing/registry_process.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;

using CtlRun = drover::testing::CommandResult;

class CtlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = drover::testing::StartRegistryProcess(
        DROVER_BINARY,
        {"--data-dir", dir_.path(), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
    ASSERT_NE(registry_.http, 0) << registry_.line;
    url_ = "http://127.0.0.1:" + std::to_string(registry_.http);
  }

  CtlRun Ctl(const std::string& args) {
    return drover::testing::RunCommand(std::string(DROVER_BINARY) + " ctl --registry " + url_ +
                                       " " + args);
  }

  drover::testing::TempDir dir_;
  drover::testing::RegistryProcess registry_;
  std::string url_;
};

TEST_F(CtlTest, RegisterListDrainDeregister) {
  auto reg = Ctl("register zone z1 --address 127.0.0.1:9001 --generation 3 --zone eu-1");
  ASSERT_EQ(reg.exit_code, 0) << reg.out;
  EXPECT_NE(reg.out.find("registered at revision 1"), std::string::npos) << reg.out;
  ASSERT_EQ(Ctl("register zone z2 --address 127.0.0.1:9002").exit_code, 0);

  auto table = Ctl("list zone");
  ASSERT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find("ID  ADDRESS"), std::string::npos) << table.out;
  EXPECT_TRUE(
      std::regex_search(table.out, std::regex(R"(z1\s+127\.0\.0\.1:9001\s+READY\s+yes\s+3)")))
      << table.out;

  // Drain and deregister find the current generation themselves.
  EXPECT_EQ(Ctl("drain zone z1").exit_code, 0);
  EXPECT_EQ(Ctl("deregister zone z2").exit_code, 0);
  auto json = Ctl("--json list zone");
  ASSERT_EQ(json.exit_code, 0);
  auto body = nlohmann::json::parse(json.out);
  ASSERT_EQ(body["instances"].size(), 1u);
  EXPECT_EQ(body["instances"][0]["state"], "DRAINING");
  EXPECT_EQ(body["revision"], 4);

  auto watch = Ctl("--json watch zone --count 1");
  ASSERT_EQ(watch.exit_code, 0) << watch.out;
  EXPECT_EQ(nlohmann::json::parse(watch.out)["type"], "RESYNC");

  auto services = Ctl("services");
  EXPECT_TRUE(std::regex_search(services.out, std::regex(R"(zone\s+1\s+0\s+no)"))) << services.out;
}

TEST_F(CtlTest, ExitCodesSayWhatWentWrong) {
  auto missing = Ctl("drain zone nobody");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("not registered"), std::string::npos) << missing.out;
  auto bad_name = Ctl("list 'bad name'");
  EXPECT_EQ(bad_name.exit_code, 2);
  EXPECT_NE(bad_name.out.find("may only contain"), std::string::npos) << bad_name.out;
  ASSERT_EQ(Ctl("register zone z1 --address 127.0.0.1:9001 --generation 5").exit_code, 0);
  auto fenced = Ctl("deregister zone z1 --generation 4");
  EXPECT_EQ(fenced.exit_code, 1);
  EXPECT_NE(fenced.out.find("FENCED"), std::string::npos) << fenced.out;
  // A watch the registry refuses (a revision it has not reached) is a refusal: exit 1 with the
  // code and message, not the raw JSON body.
  auto ahead = Ctl("watch zone --from 9999");
  EXPECT_EQ(ahead.exit_code, 1) << ahead.out;
  EXPECT_NE(ahead.out.find("registry answered 400: OUT_OF_RANGE: "), std::string::npos)
      << ahead.out;
  EXPECT_EQ(ahead.out.find("{\"error\""), std::string::npos) << ahead.out;
  const std::string saved = url_;
  url_ = "http://127.0.0.1:1";
  auto down = Ctl("services");
  EXPECT_EQ(down.exit_code, 3);
  EXPECT_NE(down.out.find("cannot reach the registry at 127.0.0.1:1"), std::string::npos)
      << down.out;
  url_ = "ftp://x";
  EXPECT_EQ(Ctl("services").exit_code, 2);
  url_ = saved;
}

// What serves is shown beside what was deployed last: after a failed deploy of v7, v6 serves.
TEST_F(CtlTest, StatusSummarisesTheRegistryWithTheLatestDeployOfEachService) {
  ASSERT_EQ(Ctl("register zone z1 --address 127.0.0.1:9001 --version v6").exit_code, 0);
  ASSERT_EQ(Ctl("register zone z2 --address 127.0.0.1:9002 --state STARTING").exit_code, 0);
  ASSERT_EQ(Ctl("register chat c1 --address 127.0.0.1:9003").exit_code, 0);
  // Deploy records, as the deploy controller keeps them in the registry; the newest counts.
  for (const auto& [id, version, verdict] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"zone-v6-1", "v6", "pass"}, {"zone-v7-1", "v7", "fail"}}) {
    const nlohmann::json body = {
        {"expect_version", 0},
        {"record", {{"service", "zone"}, {"version", version}, {"verdict", verdict}}}};
    ASSERT_EQ(drover::testing::Http(registry_.http, "PUT", "/v1/deploys/" + id, body.dump()).status,
              200);
  }
  auto table = Ctl("status");
  ASSERT_EQ(table.exit_code, 0) << table.out;
  EXPECT_TRUE(std::regex_search(table.out, std::regex(R"(READY\s+revision 3)"))) << table.out;
  EXPECT_TRUE(
      std::regex_search(table.out, std::regex(R"(SERVICE\s+READY\s+SERVING\s+LAST DEPLOYED)")))
      << table.out;
  EXPECT_TRUE(std::regex_search(table.out, std::regex(R"(zone\s+1/2\s+v6 \(1\)\s+v7\s+fail)")))
      << table.out;
  EXPECT_TRUE(std::regex_search(table.out, std::regex(R"(chat\s+1/1\s+unversioned \(1\)\s+-\s+-)")))
      << table.out;
  // Output into a pipe carries no colour codes.
  EXPECT_EQ(table.out.find('\033'), std::string::npos) << table.out;

  auto json = Ctl("--json status");
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const auto body = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_FALSE(body.is_discarded()) << json.out;
  EXPECT_EQ(body["registry"]["ready"], true);
  EXPECT_EQ(body["registry"]["revision"], 3);
  EXPECT_EQ(body["latest_deploys"]["zone"]["version"], "v7");
  EXPECT_EQ(body["services"][1]["name"], "zone");
  EXPECT_EQ(body["services"][1]["serving"], nlohmann::json({{"v6", 1}}));
  EXPECT_FALSE(body.contains("deploys_error"));

  auto history = Ctl("deploys zone");
  ASSERT_EQ(history.exit_code, 0) << history.out;
  EXPECT_LT(history.out.find("zone-v7-1"), history.out.find("zone-v6-1")) << history.out;
}

}  // namespace
