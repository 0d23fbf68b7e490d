// TLS and bearer-token ACLs end to end (REG-8): a registry serving HTTPS and gRPC over TLS with a
// certificate from a CA the test makes with OpenSSL, and a token file; every client of it -- a
// zone server (ServerHost), a DiscoveryClient, a gateway and `drover ctl` -- connecting with
// TLS and a token. Then the refusals, each with an error that says what is wrong: a wrong token,
// an expired one, one for another service, none at all, a CA that did not sign the registry's
// certificate, and plaintext against the TLS port.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>

#include "drover/clock.h"
#include "drover/discovery.h"
#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/line_client.h"
#include "testing/port_in.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::Eventually;
using drover::testing::PortIn;
using drover::testing::RunCommand;

constexpr const char* kZoneToken = "zone-token-0123456789abcdef";
constexpr const char* kChatToken = "chat-token-0123456789abcdef";
constexpr const char* kReadToken = "read-token-0123456789abcdef";
constexpr const char* kExpiredToken = "old-token-0123456789abcdef";
constexpr const char* kWrongToken = "guess-token-0123456789abcdef";
constexpr const char* kDeployToken = "deploy-token-0123456789abcdef";

class TlsAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string d = dir_.path();
    ca_ = d + "/ca.pem";
    other_ca_ = d + "/other-ca.pem";
    // A CA, a server certificate it signs for 127.0.0.1 and localhost, and an unrelated CA.
    std::ofstream(d + "/san.ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
    for (const std::string& command : {
             "openssl req -x509 " + ec + "-days 1 -subj /CN=drover-test-ca -keyout " + d +
                 "/ca.key -out " + ca_,
             "openssl req -x509 " + ec + "-days 1 -subj /CN=someone-else -keyout " + d +
                 "/other.key -out " + other_ca_,
             "openssl req " + ec + "-subj /CN=localhost -keyout " + d + "/key.pem -out " + d +
                 "/req.csr",
             "openssl x509 -req -in " + d + "/req.csr -CA " + ca_ + " -CAkey " + d +
                 "/ca.key -CAcreateserial -days 1 -extfile " + d + "/san.ext -out " + d +
                 "/cert.pem",
         }) {
      const auto made = RunCommand(command);
      ASSERT_EQ(made.exit_code, 0) << command << "\n" << made.out;
    }
    std::ofstream(d + "/tokens.yaml")
        << "tokens:\n"
        << "  - name: zone-servers\n    token: " << kZoneToken << "\n    write: [zone]\n"
        << "  - name: chat-servers\n    token: " << kChatToken << "\n    write: [chat]\n"
        << "  - name: readers\n    token: " << kReadToken << "\n    read_only: true\n"
        << "  - name: zone-deployer\n    token: " << kDeployToken
        << "\n    write: [zone]\n    deploy: [zone]\n"
        << "  - name: zone-2020\n    token: " << kExpiredToken << "\n    write: [zone]\n"
        << "    expires: \"2020-01-01T00:00:00Z\"\n";
    registry_.emplace(std::vector<std::string>{
        DROVER_BINARY, "registry", "--data-dir", d + "/data", "--http", "127.0.0.1:0", "--grpc",
        "127.0.0.1:0", "--tls-cert", d + "/cert.pem", "--tls-key", d + "/key.pem", "--auth-tokens",
        d + "/tokens.yaml"});
    const auto line = registry_->ReadLine(20s);
    ASSERT_TRUE(line.has_value());
    https_ = "https://127.0.0.1:" + std::to_string(PortIn(*line, R"(https://127\.0\.0\.1:(\d+))"));
    grpcs_ = "grpcs://127.0.0.1:" + std::to_string(PortIn(*line, R"(grpcs://127\.0\.0\.1:(\d+))"));
    ASSERT_NE(https_, "https://127.0.0.1:0") << *line;
    ASSERT_NE(grpcs_, "grpcs://127.0.0.1:0") << *line;
  }

  std::vector<std::string> ZoneArgv(const std::string& token, const std::string& ca) const {
    return {DROVER_BINARY,
            "sample",
            "zone",
            "--registry",
            grpcs_,
            "--registry-ca",
            ca,
            "--token",
            token,
            "--id",
            "z1",
            "--warmup-ms",
            "0",
            "--health",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "warn"};
  }

  // Runs a zone server that is expected to be refused; its output (stderr included).
  drover::testing::CommandResult RefusedZone(const std::string& token) const {
    std::string command = "timeout 30";
    for (const std::string& arg : ZoneArgv(token, ca_)) command += " '" + arg + "'";
    return RunCommand(command);
  }

  drover::testing::CommandResult Ctl(const std::string& token, const std::string& ca,
                                     const std::string& args) const {
    return RunCommand(std::string("timeout 30 ") + DROVER_BINARY + " ctl --registry " + https_ +
                      " --ca " + ca + " --token " + token + " " + args);
  }

  std::unique_ptr<drover::DiscoveryClient> Discover(const std::string& registry,
                                                    const std::string& ca,
                                                    const std::string& token) {
    drover::DiscoveryOptions o;
    o.registry = registry;
    o.registry_ca = ca;
    o.token = token;
    o.service = "zone";
    o.reconnect_backoff = 100ms;
    auto client = drover::DiscoveryClient::Start(o, clock_);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }

  // The error a DiscoveryClient reports once it has tried; OK if it got an answer.
  static drover::Status DiscoveryError(const drover::DiscoveryClient& client) {
    drover::Status error;
    (void)Eventually(
        [&] {
          error = client.Snapshot().status();
          return error.ok() ||
                 error.message().find("no answer from the registry yet") == std::string::npos;
        },
        15s);
    return error;
  }

  drover::testing::TempDir dir_;
  drover::RealClock clock_;
  std::string ca_, other_ca_, https_, grpcs_;
  std::optional<ChildProcess> registry_;
};

TEST_F(TlsAuthTest, EveryClientConnectsOverTlsWithItsToken) {
  // A ServerHost registers over TLS with a token that may write "zone".
  ChildProcess zone(ZoneArgv(kZoneToken, ca_));
  ASSERT_TRUE(zone.ReadLine(20s).has_value());
  ASSERT_TRUE(zone.ReadLine(20s).has_value());  // "ready and registered"

  // ctl over HTTPS with a read-only token.
  const auto list = Ctl(kReadToken, ca_, "list zone");
  ASSERT_EQ(list.exit_code, 0) << list.out;
  EXPECT_NE(list.out.find("z1"), std::string::npos) << list.out;

  // A DiscoveryClient over gRPC with TLS.
  auto discovery = Discover(grpcs_, ca_, kReadToken);
  ASSERT_NE(discovery, nullptr);
  ASSERT_TRUE(Eventually([&] {
    auto snapshot = discovery->Snapshot();
    return snapshot.ok() && snapshot->table->endpoints().size() == 1;
  }));

  // A gateway discovering through the same TLS registry routes a player to z1.
  const std::string config = dir_.path() + "/gateway.yaml";
  std::ofstream(config) << "registry: " << grpcs_ << "\nregistry_ca: " << ca_
                        << "\ntoken: " << kReadToken << "\nthreads: 1\nadmin: \"\"\n"
                        << "listeners:\n  - name: zone\n    address: 127.0.0.1:0\n"
                        << "    service: zone\n";
  ChildProcess gateway({DROVER_BINARY, "gateway", "--config", config});
  const auto line = gateway.ReadLine(20s);
  ASSERT_TRUE(line.has_value());
  const std::uint16_t port = PortIn(*line, R"(zone=127\.0\.0\.1:(\d+))");
  ASSERT_NE(port, 0) << *line;
  std::optional<std::string> welcome;
  for (int i = 0; i < 400 && welcome != "WELCOME z1"; ++i) {  // until discovery has z1
    welcome = drover::testing::LineClient(port).Ask("HELLO ann");
    if (welcome != "WELCOME z1") std::this_thread::sleep_for(25ms);
  }
  EXPECT_EQ(welcome, "WELCOME z1");

  // The zone server leaves over TLS too: drained and deregistered, exit 0.
  zone.Signal(SIGTERM);
  EXPECT_EQ(zone.Wait(), 0);
  EXPECT_TRUE(Eventually([&] {
    auto snapshot = discovery->Snapshot();
    return snapshot.ok() && snapshot->table->endpoints().empty();
  }));
}

TEST_F(TlsAuthTest, WrongExpiredOtherServiceAndMissingTokensAreRefusedClearly) {
  struct Case {
    std::string token;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {kWrongToken, "UNAUTHENTICATED: register: unknown bearer token"},
           {kExpiredToken,
            "UNAUTHENTICATED: register: token 'zone-2020' expired at 2020-01-01T00:00:00Z"},
           {kChatToken,
            "PERMISSION_DENIED: register: token 'chat-servers' may not write service 'zone'"},
           {kReadToken,
            "PERMISSION_DENIED: register: token 'readers' may not write service 'zone'"},
           {"", "UNAUTHENTICATED: register: missing 'Authorization: Bearer <token>'"},
       }) {
    const auto zone = RefusedZone(c.token);
    EXPECT_EQ(zone.exit_code, 1) << c.token << "\n" << zone.out;
    EXPECT_NE(zone.out.find(c.expect), std::string::npos) << c.token << "\n" << zone.out;
  }
  const auto list = Ctl(kWrongToken, ca_, "list zone");
  EXPECT_NE(list.exit_code, 0) << list.out;
  EXPECT_NE(list.out.find("unknown bearer token"), std::string::npos) << list.out;
  const auto expired = Ctl(kExpiredToken, ca_, "list zone");
  EXPECT_NE(expired.exit_code, 0) << expired.out;
  EXPECT_NE(expired.out.find("token 'zone-2020' expired at 2020-01-01T00:00:00Z"),
            std::string::npos)
      << expired.out;
  const auto other = Ctl(kChatToken, ca_, "register zone z9 --address 127.0.0.1:9");
  EXPECT_NE(other.exit_code, 0) << other.out;
  EXPECT_NE(other.out.find("may not write service 'zone'"), std::string::npos) << other.out;

  // A reader with an expired token hears why, not just "unavailable".
  auto discovery = Discover(grpcs_, ca_, kExpiredToken);
  ASSERT_NE(discovery, nullptr);
  const drover::Status refused = DiscoveryError(*discovery);
  EXPECT_EQ(refused.code(), drover::StatusCode::kUnauthenticated) << refused.ToString();
  EXPECT_NE(refused.message().find("expired at 2020-01-01T00:00:00Z"), std::string::npos)
      << refused.ToString();

  // A gateway with a wrong token serves nobody and says why in its log.
  const std::string config = dir_.path() + "/gateway.yaml";
  std::ofstream(config) << "registry: " << grpcs_ << "\nregistry_ca: " << ca_
                        << "\ntoken: " << kWrongToken << "\nthreads: 1\nadmin: \"\"\n"
                        << "listeners:\n  - name: zone\n    address: 127.0.0.1:0\n"
                        << "    service: zone\n";
  const auto gateway =
      RunCommand(std::string("timeout 4 ") + DROVER_BINARY + " gateway --config " + config);
  EXPECT_NE(gateway.out.find("answered: unknown bearer token"), std::string::npos) << gateway.out;
}

TEST_F(TlsAuthTest, UntrustedCertificatesPlaintextAndBadCaFilesGetNowhere) {
  // A CA that did not sign the registry's certificate.
  auto untrusted = Discover(grpcs_, other_ca_, kReadToken);
  ASSERT_NE(untrusted, nullptr);
  const drover::Status handshake = DiscoveryError(*untrusted);
  EXPECT_EQ(handshake.code(), drover::StatusCode::kUnavailable) << handshake.ToString();
  const auto ctl = Ctl(kReadToken, other_ca_, "list zone");
  EXPECT_EQ(ctl.exit_code, 3) << ctl.out;
  EXPECT_NE(ctl.out.find("certificate verify failed"), std::string::npos) << ctl.out;

  // Plaintext gRPC against the TLS port.
  auto plaintext = Discover("grpc" + grpcs_.substr(5), "", kReadToken);
  ASSERT_NE(plaintext, nullptr);
  EXPECT_EQ(DiscoveryError(*plaintext).code(), drover::StatusCode::kUnavailable);

  // Mistakes in the client's own settings are caught before any connection.
  drover::DiscoveryOptions o;
  o.service = "zone";
  o.registry = grpcs_;
  o.registry_ca = dir_.path() + "/missing.pem";
  auto missing = drover::DiscoveryClient::Start(o, clock_);
  EXPECT_EQ(missing.status().code(), drover::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("cannot read the registry CA file"), std::string::npos)
      << missing.status().ToString();
  o.registry_ca = dir_.path() + "/tokens.yaml";
  EXPECT_NE(
      drover::DiscoveryClient::Start(o, clock_).status().message().find("holds no PEM certificate"),
      std::string::npos);
  o.registry = "grpc" + grpcs_.substr(5);
  o.registry_ca = ca_;
  EXPECT_NE(drover::DiscoveryClient::Start(o, clock_).status().message().find(
                "is plaintext (grpc://) but a CA file was given"),
            std::string::npos);
}

// The agent over HTTPS with the same token file: `drover deploy` runs a zone server through it
// only with a token that may deploy "zone"; a registry write token, or none, is refused with a
// message that says which right is missing.
TEST_F(TlsAuthTest, AnAgentOverTlsStartsInstancesOnlyForATokenWithDeployRights) {
  const std::string d = dir_.path();
  ChildProcess agent({DROVER_BINARY, "--log-level", "warn", "agent", "--data-dir", d + "/agent",
                      "--listen", "127.0.0.1:0", "--tls-cert", d + "/cert.pem", "--tls-key",
                      d + "/key.pem", "--auth-tokens", d + "/tokens.yaml"});
  const auto line = agent.ReadLine(20s);
  ASSERT_TRUE(line.has_value());
  const std::uint16_t port = PortIn(*line, R"(https://127\.0\.0\.1:(\d+))");
  ASSERT_NE(port, 0) << *line;
  const std::string agent_url = "https://127.0.0.1:" + std::to_string(port);

  const auto deploy = [&](const std::string& token, const std::string& version) {
    std::string command =
        "DROVER_TOKEN=" + token + " timeout 60 " + DROVER_BINARY +
        " --log-level warn deploy zone --agent " + agent_url + " --agent-ca " + ca_ +
        " --registry " + https_ + " --registry-ca " + ca_ + " --version " + version +
        " --min-healthy-ms 1000 --check-delay-ms 500 --stop-grace-ms 5000 -- " + DROVER_BINARY +
        " sample zone --registry " + grpcs_ + " --registry-ca " + ca_ + " --token " + kZoneToken +
        " --id {id} --warmup-ms 0 --health 127.0.0.1:{health_port} --listen "
        "127.0.0.1:{port} --log-level warn";
    return RunCommand(command);
  };

  // Refused before anything started: exit 4.
  const auto none = deploy("", "v0");
  EXPECT_EQ(none.exit_code, 4) << none.out;
  EXPECT_NE(none.out.find("missing 'Authorization: Bearer <token>'"), std::string::npos)
      << none.out;
  const auto writer = deploy(kZoneToken, "v0");
  EXPECT_EQ(writer.exit_code, 4) << writer.out;
  EXPECT_NE(writer.out.find("token 'zone-servers' may not deploy service 'zone'"),
            std::string::npos)
      << writer.out;

  const auto passed = deploy(kDeployToken, "v1");
  ASSERT_EQ(passed.exit_code, 0) << passed.out;
  EXPECT_NE(passed.out.find("PASSED"), std::string::npos) << passed.out;
  const auto list = Ctl(kReadToken, ca_, "list zone");
  EXPECT_NE(list.out.find("zone-v1-1"), std::string::npos) << list.out;

  // Plain HTTP to the HTTPS agent gets no answer that could be mistaken for one.
  const auto plain =
      RunCommand("DROVER_TOKEN=" + std::string(kDeployToken) + " timeout 30 " + DROVER_BINARY +
                 " deploy zone --agent http://127.0.0.1:" + std::to_string(port) + " --registry " +
                 https_ + " --registry-ca " + ca_ + " --version v2 -- /bin/true");
  EXPECT_NE(plain.exit_code, 0) << plain.out;
  agent.Signal(SIGTERM);
  EXPECT_EQ(agent.Wait(), 0);
}

// An agent that other machines can reach starts whatever it is sent: without tokens it refuses
// to start, unless told --insecure, and then warns.
TEST(AgentExposureTest, ANonLoopbackAgentNeedsTokensOrInsecure) {
  drover::testing::TempDir dir;
  const auto refused = RunCommand(std::string("timeout 20 ") + DROVER_BINARY +
                                  " agent --data-dir " + dir.path() + " --listen 0.0.0.0:0");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("give --auth-tokens FILE"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("--insecure"), std::string::npos) << refused.out;

  const auto open =
      RunCommand(std::string("timeout -s INT 3 ") + DROVER_BINARY + " agent --data-dir " +
                 dir.path() + " --listen 0.0.0.0:0 --insecure");
  EXPECT_NE(open.out.find("listening on http://0.0.0.0:"), std::string::npos) << open.out;
  EXPECT_NE(open.out.find("INSECURE: the API on 0.0.0.0:0 has no authentication"),
            std::string::npos)
      << open.out;
}

}  // namespace
