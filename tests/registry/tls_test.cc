// TLS and --config against a real `drover registry`: HTTPS and gRPC over TLS with a certificate
// the test makes itself, clients that trust it, and clients that do not.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "drover/registry/v1/registry.grpc.pb.h"
#include "testing/child_process.h"
#include "testing/http_client.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::RunCommand;
namespace pb = ::drover::registry::v1;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string d = dir_.path();
    cert_ = d + "/cert.pem";
    // A throwaway self-signed certificate for localhost and 127.0.0.1, valid for a day.
    auto made = RunCommand(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
        "-nodes -days 1 -subj /CN=localhost -addext "
        "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
        d + "/key.pem -out " + cert_);
    ASSERT_EQ(made.exit_code, 0) << made.out;
    std::ofstream(d + "/registry.yaml")
        << "data_dir: " << d << "/data\n"
        << "http: 127.0.0.1:0\ngrpc: 127.0.0.1:0\n"
        << "tls_cert: " << cert_ << "\ntls_key: " << d << "/key.pem\n";
    registry_ = std::make_unique<drover::testing::ChildProcess>(
        std::vector<std::string>{DROVER_BINARY, "registry", "--config", d + "/registry.yaml"});
    auto line = registry_->ReadLine(20s);
    ASSERT_TRUE(line.has_value());
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        *line, m, std::regex(R"(https://127\.0\.0\.1:(\d+) and grpcs://127\.0\.0\.1:(\d+))")))
        << *line;
    https_ = "https://127.0.0.1:" + m[1].str();
    grpc_target_ = "127.0.0.1:" + m[2].str();
  }

  drover::testing::CommandResult Ctl(const std::string& args) {
    return RunCommand(std::string(DROVER_BINARY) + " ctl " + args);
  }

  drover::testing::TempDir dir_;
  std::unique_ptr<drover::testing::ChildProcess> registry_;
  std::string cert_;
  std::string https_;
  std::string grpc_target_;
};

TEST_F(TlsTest, ClientsThatTrustTheCertificateGetInAndOthersDoNot) {
  auto reg =
      Ctl("--registry " + https_ + " --ca " + cert_ + " register zone z1 --address 127.0.0.1:9001");
  ASSERT_EQ(reg.exit_code, 0) << reg.out;
  auto list = Ctl("--registry " + https_ + " --ca " + cert_ + " list zone");
  ASSERT_EQ(list.exit_code, 0) << list.out;
  EXPECT_NE(list.out.find("z1"), std::string::npos) << list.out;

  // Not trusted (no --ca: the system store does not know this certificate): unreachable, exit 3.
  auto untrusted = Ctl("--registry " + https_ + " list zone");
  EXPECT_EQ(untrusted.exit_code, 3) << untrusted.out;
  EXPECT_NE(untrusted.out.find("certificate verify failed"), std::string::npos) << untrusted.out;
  // Plain HTTP to the TLS port gets nowhere, and says which scheme to use.
  auto plain = Ctl("--registry http" + https_.substr(5) + " list zone");
  EXPECT_EQ(plain.exit_code, 3) << plain.out;
  EXPECT_NE(plain.out.find("if it serves HTTPS, use https://"), std::string::npos) << plain.out;

  // A watch that stops after one event returns at once: the TLS close does not wait for the
  // registry to stop streaming (it used to take ~5 s).
  const auto began = std::chrono::steady_clock::now();
  auto watch = Ctl("--registry " + https_ + " --ca " + cert_ + " --json watch zone --count 1");
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_EQ(watch.exit_code, 0) << watch.out;
  EXPECT_NE(watch.out.find("RESYNC"), std::string::npos) << watch.out;
  EXPECT_LT(took, 3s) << "ctl watch --count 1 over HTTPS took "
                      << std::chrono::duration<double>(took).count() << " s";

  // gRPC: a TLS channel that trusts the certificate lists; a plaintext one cannot.
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadAll(cert_);
  auto stub = pb::Registry::NewStub(grpc::CreateChannel(grpc_target_, grpc::SslCredentials(ssl)));
  pb::ListRequest req;
  req.set_service("zone");
  pb::ListReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  ASSERT_TRUE(stub->List(&ctx, req, &reply).ok());
  ASSERT_EQ(reply.instances_size(), 1);
  EXPECT_EQ(reply.instances(0).id(), "z1");

  auto insecure =
      pb::Registry::NewStub(grpc::CreateChannel(grpc_target_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + 3s);
  EXPECT_FALSE(insecure->List(&ctx2, req, &reply).ok());
}

TEST(RegistryConfigTest, BadConfigIsRefusedAndFlagsOverrideIt) {
  drover::testing::TempDir dir;
  const std::string bad = dir.path() + "/bad.yaml";
  std::ofstream(bad) << "http: 127.0.0.1:0\nlisten_everywhere: true\n";
  auto unknown = RunCommand(std::string(DROVER_BINARY) + " registry --config " + bad);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("unknown key 'listen_everywhere'"), std::string::npos) << unknown.out;

  const std::string range = dir.path() + "/range.yaml";
  std::ofstream(range) << "tick_ms: 1\n";
  auto out_of_range = RunCommand(std::string(DROVER_BINARY) + " registry --config " + range);
  EXPECT_EQ(out_of_range.exit_code, 2) << out_of_range.out;
  EXPECT_NE(out_of_range.out.find("tick_ms"), std::string::npos) << out_of_range.out;

  // The file names an address that cannot be used; the flag given on the command line wins.
  const std::string cfg = dir.path() + "/registry.yaml";
  std::ofstream(cfg) << "http: not-an-address\ndata_dir: " << dir.path() << "/data\n";
  drover::testing::ChildProcess registry(
      {DROVER_BINARY, "registry", "--config", cfg, "--http", "127.0.0.1:0", "--grpc", "off"});
  auto line = registry.ReadLine(20s);
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("listening on http://127.0.0.1:"), std::string::npos) << *line;
}

// The dashboard's gateway and agent URLs: lists in the file (or one string), repeatable flags
// that win over the file, and the same check for both.
TEST(RegistryConfigTest, DashboardUrlsComeFromTheFileOrTheFlags) {
  drover::testing::TempDir dir;
  const std::string cfg = dir.path() + "/registry.yaml";
  std::ofstream(cfg) << "data_dir: " << dir.path() << "/data\ngrpc: \"off\"\n"
                     << "ui_gateways: [\"http://127.0.0.1:9900\", \"http://127.0.0.1:9901/\"]\n"
                     << "ui_agents: http://127.0.0.1:7080\n";
  auto config_of = [](drover::testing::ChildProcess& registry) {
    const auto line = registry.ReadLine(20s);
    std::smatch m;
    const std::string text = line.value_or("");
    if (!std::regex_search(text, m, std::regex(R"(http://127\.0\.0\.1:(\d+))"))) {
      return nlohmann::json();
    }
    const auto port = static_cast<std::uint16_t>(std::stoi(m[1].str()));
    return nlohmann::json::parse(drover::testing::Http(port, "GET", "/ui/config.json").body,
                                 nullptr, false);
  };
  {
    drover::testing::ChildProcess registry(
        {DROVER_BINARY, "registry", "--config", cfg, "--http", "127.0.0.1:0"});
    EXPECT_EQ(
        config_of(registry),
        nlohmann::json::parse(R"({"gateways":["http://127.0.0.1:9900",)"
                              R"("http://127.0.0.1:9901"],"agents":["http://127.0.0.1:7080"]})"));
  }
  {
    drover::testing::ChildProcess registry({DROVER_BINARY, "registry", "--config", cfg, "--http",
                                            "127.0.0.1:0", "--ui-agent", "http://127.0.0.1:7081",
                                            "--ui-agent", "http://127.0.0.1:7082"});
    EXPECT_EQ(config_of(registry)["agents"],
              nlohmann::json::parse(R"(["http://127.0.0.1:7081","http://127.0.0.1:7082"])"));
  }

  const std::string bad = dir.path() + "/bad.yaml";
  std::ofstream(bad) << "data_dir: " << dir.path() << "/data\nui_gateways: [\"127.0.0.1:9900\"]\n";
  // Bounded: were the value accepted, the registry would run.
  auto refused =
      RunCommand("timeout 10 " + std::string(DROVER_BINARY) + " registry --config " + bad);
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("must start with http:// or https://"), std::string::npos)
      << refused.out;
  auto bad_flag =
      RunCommand("timeout 10 " + std::string(DROVER_BINARY) + " registry --data-dir " + dir.path() +
                 "/data --http 127.0.0.1:0 --grpc off --ui-gateway http://gw:9900/admin");
  EXPECT_NE(bad_flag.exit_code, 0) << bad_flag.out;
  EXPECT_NE(bad_flag.out.find("with no path"), std::string::npos) << bad_flag.out;
}

}  // namespace
