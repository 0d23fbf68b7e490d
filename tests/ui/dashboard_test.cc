// The web dashboard in headless Chromium (Debian's chromium, driven by playwright-core from
// tests/ui/node_modules): a real `drover registry` serving /ui/, a real `drover gateway` and a
// real `drover agent` behind its panels, and dashboard_test.mjs playing the operator -- it
// registers instances, drains one, has the registry restarted under the open page, and checks
// that the page follows all of it without a reload. Screenshots land in <build>/test-artifacts/.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "testing/child_process.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/port_in.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::PortIn;

std::string Chromium() {
  const char* env = std::getenv("DROVER_CHROMIUM");
  return env != nullptr && *env != '\0' ? env : "/usr/bin/chromium";
}

// Node, playwright-core and the browser are installed by scripts/setup.sh; without them this
// test fails, saying what is missing, instead of skipping.
void CheckTools() {
  ASSERT_EQ(drover::testing::RunCommand("command -v node").exit_code, 0)
      << "node is not on PATH: run scripts/setup.sh (installs nodejs and npm)";
  ASSERT_TRUE(std::filesystem::exists(std::string(DROVER_UI_TEST_DIR) +
                                      "/node_modules/playwright-core/package.json"))
      << DROVER_UI_TEST_DIR << "/node_modules is missing: run scripts/setup.sh (npm ci there)";
  ASSERT_TRUE(std::filesystem::exists(Chromium()))
      << Chromium() << " is missing: run scripts/setup.sh (Debian package chromium), or point "
      << "DROVER_CHROMIUM at a Chromium binary";
}

// Runs the browser script (bounded by timeout(1) even if it hangs) and hands each line it prints
// to `on_line`, which may act on requests such as RESTART-REGISTRY. Returns whether it exited 0;
// its output goes to the test's log.
bool RunPage(const std::string& registry_url, const std::string& screenshot,
             std::vector<std::string> extra,
             const std::function<void(const std::string&)>& on_line = {},
             const std::string& ca_file = {}) {
  std::filesystem::create_directories(std::filesystem::path(screenshot).parent_path());
  const auto node = drover::testing::RunCommand("command -v node", false);
  std::vector<std::string> argv = {
      "/usr/bin/env",
      // The script's own calls to an HTTPS registry trust its CA.
      "NODE_EXTRA_CA_CERTS=" + ca_file, "DROVER_CHROMIUM=" + Chromium(), "timeout", "-k", "5",
      "150", node.out.substr(0, node.out.find('\n')), DROVER_UI_TEST_DIR "/dashboard_test.mjs",
      registry_url, screenshot};
  argv.insert(argv.end(), extra.begin(), extra.end());
  ChildProcess page(argv);
  while (auto line = page.ReadLine(160s)) {
    std::cout << *line << std::endl;
    if (on_line) on_line(*line);
  }
  const int status = page.Wait();
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// `drover registry` on fixed ports, so that it can be restarted where the page and the gateway
// expect it.
class RegistryProcess {
 public:
  explicit RegistryProcess(std::vector<std::string> argv) : argv_(std::move(argv)) { Start(); }

  void Start() {
    process_ = std::make_unique<ChildProcess>(argv_);
    line_ = process_->ReadLine(20s).value_or("");
  }
  // SIGTERM (a clean stop) and start again on the same data directory and ports.
  void Restart() {
    process_->Signal(SIGTERM);
    process_->Wait();
    Start();
  }
  const std::string& line() const { return line_; }

 private:
  std::vector<std::string> argv_;
  std::unique_ptr<ChildProcess> process_;
  std::string line_;
};

TEST(DashboardTest, FollowsTheRegistryGatewayAndAgentWithoutAReload) {
  CheckTools();
  if (HasFatalFailure()) return;
  drover::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());

  ChildProcess agent(
      {DROVER_BINARY, "agent", "--data-dir", dir.path() + "/agent", "--listen", "127.0.0.1:0"});
  const auto agent_line = agent.ReadLine(20s);
  ASSERT_TRUE(agent_line.has_value());
  const std::uint16_t agent_port = PortIn(*agent_line, R"(http://127\.0\.0\.1:(\d+))");
  ASSERT_NE(agent_port, 0) << *agent_line;
  // Two finished deploys in the agent's history, as `drover deploy` records them.
  const auto v1 = drover::testing::Http(
      agent_port, "PUT", "/v1/deploys/zone-v1-1700000000000",
      R"({"service":"zone","version":"v1","instances":2,"started_at_ms":1700000000000,)"
      R"("verdict":"pass","reason":"2 instance(s) READY for 10 s, no crash in 2 checks",)"
      R"("finished_at_ms":1700000014000,"decided_after_s":12.1,"rollback_s":0,)"
      R"("timeline":[{"after_s":0,"what":"deploy of zone v1 began"},)"
      R"({"after_s":12.1,"what":"PASSED"}]})");
  ASSERT_EQ(v1.status, 200) << v1.body;
  const auto v2 = drover::testing::Http(
      agent_port, "PUT", "/v1/deploys/zone-v2-1700000100000",
      R"({"service":"zone","version":"v2","instances":2,"started_at_ms":1700000100000,)"
      R"("verdict":"fail","reason":"zone-v2-1 crashed again between crash watches",)"
      R"("finished_at_ms":1700000110000,"decided_after_s":8.2,"rollback_s":1.4,)"
      R"("timeline":[{"after_s":0,"what":"deploy of zone v2 began"}]})");
  ASSERT_EQ(v2.status, 200) << v2.body;

  // The gateway needs the registry's gRPC address and the registry the gateway's admin URL, and
  // a restarted registry must come back where the page and the gateway look: ports chosen first.
  const std::uint16_t admin_port = drover::testing::FreeLoopbackPort();
  const std::uint16_t http_port = drover::testing::FreeLoopbackPort();
  const std::uint16_t grpc_port = drover::testing::FreeLoopbackPort();
  RegistryProcess registry({DROVER_BINARY, "registry", "--data-dir", dir.path() + "/registry",
                            "--http", "127.0.0.1:" + std::to_string(http_port), "--grpc",
                            "127.0.0.1:" + std::to_string(grpc_port), "--ui-gateway",
                            "http://127.0.0.1:" + std::to_string(admin_port), "--ui-agent",
                            "http://127.0.0.1:" + std::to_string(agent_port)});
  ASSERT_NE(PortIn(registry.line(), R"(http://127\.0\.0\.1:(\d+))"), 0) << registry.line();
  // A running deploy in the registry's history, where its controller keeps it.
  const auto v3 = drover::testing::Http(
      http_port, "PUT", "/v1/deploys/zone-v3-1700000200000",
      R"({"expect_version":0,"active":true,"record":{"service":"zone","version":"v3",)"
      R"("instances":2,"started_at_ms":1700000200000,"verdict":"running","state":"running",)"
      R"("timeline":[{"after_s":0,"what":"deploy of zone v3 began"}]}})");
  ASSERT_EQ(v3.status, 200) << v3.body;

  const std::string config = dir.path() + "/gateway.yaml";
  std::ofstream(config) << "registry: 127.0.0.1:" << grpc_port << "\nthreads: 1\n"
                        << "admin: 127.0.0.1:" << admin_port << "\nlisteners:\n"
                        << "  - name: zone\n    address: 127.0.0.1:0\n    service: zone\n"
                        << "    slow_start_ms: 60000\n";
  ChildProcess gateway({DROVER_BINARY, "gateway", "--config", config});
  const auto gateway_line = gateway.ReadLine(20s);
  ASSERT_TRUE(gateway_line.has_value());
  const std::uint16_t zone_port = PortIn(*gateway_line, R"(zone=127\.0\.0\.1:(\d+))");
  ASSERT_NE(zone_port, 0) << *gateway_line;

  const std::string screenshot = std::string(DROVER_TEST_ARTIFACTS) + "/dashboard.png";
  int restarts = 0;
  EXPECT_TRUE(
      RunPage("http://127.0.0.1:" + std::to_string(http_port), screenshot,
              {"--zone-port", std::to_string(zone_port), "--expect-agent", "--restart-registry"},
              [&](const std::string& line) {
                if (line != "RESTART-REGISTRY") return;
                registry.Restart();
                ++restarts;
              }));
  EXPECT_EQ(restarts, 1);
  EXPECT_NE(PortIn(registry.line(), R"(http://127\.0\.0\.1:(\d+))"), 0) << registry.line();
  EXPECT_TRUE(std::filesystem::exists(screenshot));
}

TEST(DashboardTest, AsksForATokenWhenTheRegistryNeedsOne) {
  CheckTools();
  if (HasFatalFailure()) return;
  drover::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string tokens = dir.path() + "/tokens.yaml";
  std::ofstream(tokens) << "tokens:\n  - name: operator\n    token: \"operator-token-0123456789\"\n"
                        << "    write: [\"*\"]\n";
  ChildProcess registry({DROVER_BINARY, "registry", "--data-dir", dir.path() + "/registry",
                         "--http", "127.0.0.1:0", "--grpc", "off", "--auth-tokens", tokens});
  const auto line = registry.ReadLine(20s);
  ASSERT_TRUE(line.has_value());
  const std::uint16_t http_port = PortIn(*line, R"(http://127\.0\.0\.1:(\d+))");
  ASSERT_NE(http_port, 0) << *line;

  const std::string screenshot = std::string(DROVER_TEST_ARTIFACTS) + "/dashboard-token.png";
  EXPECT_TRUE(RunPage("http://127.0.0.1:" + std::to_string(http_port), screenshot,
                      {"--token", "operator-token-0123456789"}));
}

// The fleet finds its parts: with no --ui-* flags, over HTTPS with a test CA and with tokens, the
// page lists the two gateways and two agents registered in the registry (each on its own
// loopback "machine") and shows their live figures, read through the registry.
TEST(DashboardTest, FindsGatewaysAndAgentsInTheRegistryOverHttps) {
  CheckTools();
  if (HasFatalFailure()) return;
  drover::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string d = dir.path();
  std::ofstream(d + "/san.ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
  for (const std::string& command : {
           "openssl req -x509 " + ec + "-days 1 -subj /CN=drover-test-ca -keyout " + d +
               "/ca.key -out " + d + "/ca.pem",
           "openssl req " + ec + "-subj /CN=localhost -keyout " + d + "/key.pem -out " + d +
               "/req.csr",
           "openssl x509 -req -in " + d + "/req.csr -CA " + d + "/ca.pem -CAkey " + d +
               "/ca.key -CAcreateserial -days 1 -extfile " + d + "/san.ext -out " + d + "/cert.pem",
       }) {
    const auto made = drover::testing::RunCommand(command);
    ASSERT_EQ(made.exit_code, 0) << command << "\n" << made.out;
  }
  // The one certificate Chromium is told to accept: its public key's SHA-256, base64.
  const auto spki =
      drover::testing::RunCommand("openssl x509 -in " + d +
                                  "/cert.pem -pubkey -noout | openssl pkey -pubin -outform der | "
                                  "openssl dgst -sha256 -binary | base64");
  ASSERT_EQ(spki.exit_code, 0) << spki.out;
  std::ofstream(d + "/tokens.yaml")
      << "tokens:\n"
      << "  - name: operator\n    token: \"operator-token-0123456789\"\n    write: [\"*\"]\n"
      << "  - name: gateways\n    token: \"gateway-token-0123456789\"\n"
      << "    write: [drover-gateway]\n"
      << "  - name: agents\n    token: \"agent-token-0123456789\"\n    write: [drover-agent]\n";
  ChildProcess registry({DROVER_BINARY, "registry", "--data-dir", d + "/registry", "--http",
                         "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--tls-cert", d + "/cert.pem",
                         "--tls-key", d + "/key.pem", "--auth-tokens", d + "/tokens.yaml"});
  const auto line = registry.ReadLine(20s);
  ASSERT_TRUE(line.has_value());
  const std::uint16_t http_port = PortIn(*line, R"(https://127\.0\.0\.1:(\d+))");
  const std::uint16_t grpc_port = PortIn(*line, R"(grpcs://127\.0\.0\.1:(\d+))");
  ASSERT_NE(http_port, 0) << *line;
  ASSERT_NE(grpc_port, 0) << *line;
  const std::string grpcs = "grpcs://127.0.0.1:" + std::to_string(grpc_port);

  std::vector<std::unique_ptr<ChildProcess>> parts;
  for (const auto& [name, host] : {std::pair{"gw-a", "127.0.0.2"}, {"gw-b", "127.0.0.3"}}) {
    const std::string config = d + "/" + name + ".yaml";
    std::ofstream(config) << "registry: " << grpcs << "\nregistry_ca: " << d << "/ca.pem\n"
                          << "token: gateway-token-0123456789\nname: " << name
                          << "\nthreads: 1\nadmin: " << host << ":0\nlisteners:\n"
                          << "  - name: zone\n    address: " << host << ":0\n"
                          << "    service: zone\n";
    parts.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{DROVER_BINARY, "gateway", "--config", config}));
    ASSERT_TRUE(parts.back()->ReadLine(20s).has_value()) << name;
  }
  for (const auto& [name, host] : {std::pair{"agent-a", "127.0.0.4"}, {"agent-b", "127.0.0.5"}}) {
    parts.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
        DROVER_BINARY, "agent", "--data-dir", d + "/" + name, "--listen", std::string(host) + ":0",
        "--registry", grpcs, "--registry-ca", d + "/ca.pem", "--token", "agent-token-0123456789",
        "--name", name}));
    const auto agent_line = parts.back()->ReadLine(20s);
    ASSERT_TRUE(agent_line.has_value()) << name;
    const std::uint16_t port = PortIn(*agent_line, R"(http://127\.0\.0\.\d+:(\d+))");
    ASSERT_NE(port, 0) << *agent_line;
    // One finished deploy in each agent's history.
    const auto put = drover::testing::HttpTo(
        host, port, "PUT", std::string("/v1/deploys/zone-v1-1700000000000"),
        R"({"service":"zone","version":"v1","instances":1,"started_at_ms":1700000000000,)"
        R"("verdict":"pass","reason":"1 instance(s) READY","finished_at_ms":1700000014000,)"
        R"("decided_after_s":12.1,"rollback_s":0,"timeline":[]})");
    ASSERT_EQ(put.status, 200) << put.body;
  }

  const std::string screenshot = std::string(DROVER_TEST_ARTIFACTS) + "/dashboard-fleet.png";
  EXPECT_TRUE(
      RunPage("https://127.0.0.1:" + std::to_string(http_port), screenshot,
              {"--token", "operator-token-0123456789", "--expect-fleet",
               "gw-a,gw-b/agent-a,agent-b", "--spki", spki.out.substr(0, spki.out.find('\n'))},
              {}, d + "/ca.pem"));
}

}  // namespace
