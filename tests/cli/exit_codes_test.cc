// Exit codes as documented (README "Exit codes", include/drover/cli.h), for every `drover`
// subcommand and every example binary: 2 for bad usage -- parser errors included, never CLI11's
// own 100+ codes -- with a message naming the offending word or value; 1 when the other side
// refused; 3 when it could not be reached. Each row runs the real binary.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "testing/registry_process.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

struct Row {
  std::string command;  // after the binary
  int exit_code;
  std::string says;  // a piece of the message: the offending word or value, or the cause
};

void Check(const std::string& binary, const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    const auto run = drover::testing::RunCommand("timeout 20 " + binary + " " + row.command);
    EXPECT_EQ(run.exit_code, row.exit_code) << binary << " " << row.command << "\n" << run.out;
    EXPECT_NE(run.out.find(row.says), std::string::npos)
        << binary << " " << row.command << "\nwanted: " << row.says << "\ngot: " << run.out;
  }
}

TEST(ExitCodesTest, DroverSaysWhatWasWrongWithTheCommandLine) {
  Check(DROVER_BINARY,
        {
            {"", 2, "drover: a command is needed: one of bench, registry, gateway, ctl"},
            {"frobnicate", 2, "'frobnicate' is not a command here"},
            {"--bogus", 2, "--bogus"},
            {"--log-level loud ctl services", 2, "drover: --log-level: "},
            {"bench", 2, "drover bench: a command is needed: one of router"},
            {"bench router --keys abc", 2, "abc"},
            {"ctl", 2, "drover ctl: a command is needed"},
            {"ctl frobnicate", 2, "drover ctl: 'frobnicate' is not a command here; one of"},
            {"ctl list", 2, "drover ctl list: service is required"},
            {"ctl --bogus services", 2, "--bogus"},
            {"ctl drain zone z1 --generation abc", 2, "--generation = abc"},
            {"ctl list 'bad name'", 2, "may only contain"},
            {"ctl --registry ftp://x services", 2, "ftp://x"},
            {"ctl --ca /no/such.pem services", 2, "/no/such.pem"},
            {"registry --tick-ms 5", 2, "--tick-ms: Value 5 not in range"},
            {"registry --store mysql", 2, "mysql"},
            {"registry --config /no/such.yaml", 2, "/no/such.yaml"},
            {"gateway", 2, "--config is required"},
            {"gateway --config /nonexistent.yaml", 2, "/nonexistent.yaml"},
            {"agent --capacity -1", 2, "--capacity"},
            {"agent --label novalue", 2, "--label wants KEY=VALUE, got 'novalue'"},
            {"deploy zone --version v2 /bin/true", 2, "put the program after --"},
            {"deploy zone --version v2 --bogus -- /bin/true", 2, "unknown option --bogus"},
            {"deploy zone --version v2 --", 2, "no command: give it after --"},
            {"ctl list zone -- x", 2, "only `drover deploy` takes words after it"},
            {"deploy zone --version v2 --instances 0 -- /bin/true", 2, "--instances"},
            {"deploy zone --version v2 --max-surge lots -- /bin/true", 2, "lots"},
            {"rollout frobnicate d1", 2, "frobnicate"},
            {"rollout status", 2, "id is required"},
            {"demo --rate 0", 2, "--rate"},
            {"sample", 2, "drover sample: a command is needed: one of zone, whoami"},
            {"sample zone --ttl-ms 300", 2,
             "drover sample zone: --ttl-ms: Value 300 not in range 1000"},
            {"sample whoami --registry x --bogus", 2, "--bogus"},
        });
}

TEST(ExitCodesTest, VersionNamesTheReleaseAndTheAllocator) {
  const auto run = drover::testing::RunCommand("timeout 20 " DROVER_BINARY " --version");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(run.out.rfind("drover ", 0), 0u) << run.out;
  // The binary is linked with mimalloc unless the build turned it off (or sanitizes).
  EXPECT_NE(run.out.find(DROVER_ON_MIMALLOC ? "(mimalloc 2." : "(glibc malloc)"), std::string::npos)
      << run.out;
}

TEST(ExitCodesTest, TheExampleBinariesExitTheSameWay) {
  Check(ZONE_SERVER_BINARY, {
                                {"", 2, "--registry is required"},
                                {"--registry x --ttl-ms 300", 2, "--ttl-ms"},
                                {"--registry x --warmup-ms soon", 2, "soon"},
                            });
  Check(COMPUTE_WORKER_BINARY, {
                                   {"", 2, "--registry is required"},
                                   {"--registry x --mode bogus", 2, "bogus"},
                                   {"--registry x --work-ms -1", 2, "--work-ms"},
                               });
  Check(WHOAMI_SERVER_BINARY, {{"--registry x --bogus", 2, "--bogus"}});
  Check(WHOAMI_CLIENT_BINARY,
        {
            {"", 2, "give exactly one of --target and --registry"},
            {"--target 127.0.0.1:", 2, "--target wants host:port with a port 1-65535, got"},
            {"--target 127.0.0.1:http", 2, "got '127.0.0.1:http'"},
            {"--target 127.0.0.1:1 --calls 0", 2, "--calls"},
            // Nothing listens there: every call fails, said on stderr, exit 3 -- not a count
            // printed as if it were an instance's.
            {"--target 127.0.0.1:1 --calls 2 --deadline-ms 500", 3, "2 of 2 calls failed"},
        });
}

// The other side: a registry that refuses (1) and one that is not there (3).
TEST(ExitCodesTest, RefusedIsOneAndUnreachableIsThree) {
  drover::testing::TempDir dir;
  const auto registry = drover::testing::StartRegistryProcess(
      DROVER_BINARY, {"--data-dir", dir.path(), "--http", "127.0.0.1:0", "--grpc", "off"});
  ASSERT_NE(registry.http, 0) << registry.line;
  const std::string url = "http://127.0.0.1:" + std::to_string(registry.http);
  Check(DROVER_BINARY,
        {
            {"ctl --registry " + url + " drain zone nobody", 1, "zone/nobody is not registered"},
            {"ctl --registry " + url + " watch zone --from 9999", 1,
             "registry answered 400: OUT_OF_RANGE: "},
            {"ctl --registry " + url + " register zone z1 --address nowhere", 1,
             "registry answered 400: INVALID_ARGUMENT: "},
            {"rollout status zone-v1-1 --registry " + url, 1, "no deploy zone-v1-1"},
            {"ctl --registry http://127.0.0.1:1 services", 3,
             "cannot reach the registry at 127.0.0.1:1: Connection refused"},
            {"ctl --registry http://127.0.0.1:1 watch zone", 3, "cannot reach the registry"},
            {"rollout status d1 --registry http://127.0.0.1:1", 3, "127.0.0.1:1"},
        });
}

// Where ctl, deploy and rollout find the registry: --registry, else (deploy) the --spec file's
// `registry:`, else $DROVER_REGISTRY_URL, else http://127.0.0.1:7070. Each is told by the
// address the unreachable message names.
TEST(ExitCodesTest, TheRegistryUrlIsTheFlagThenTheSpecThenTheEnvironment) {
  drover::testing::TempDir dir;
  const std::string spec = dir.path() + "/deploy.yaml";
  std::ofstream(spec) << "service: zone\nversion: v2\nagents: all\n"
                      << "registry: http://127.0.0.1:2\ncommand: [/bin/true]\n";
  const std::string env = "env DROVER_REGISTRY_URL=http://127.0.0.1:3 ";
  Check(env + DROVER_BINARY,
        {
            {"ctl services", 3, "registry at 127.0.0.1:3"},
            {"ctl --registry http://127.0.0.1:1 services", 3, "registry at 127.0.0.1:1"},
            {"rollout status d1", 3, "registry at 127.0.0.1:3"},
            {"deploy --spec " + spec, 3, "registry at 127.0.0.1:2"},
            {"deploy --spec " + spec + " --registry http://127.0.0.1:1", 3,
             "registry at 127.0.0.1:1"},
            {"deploy zone --version v2 --agents all -- /bin/true", 3, "registry at 127.0.0.1:3"},
        });
}

}  // namespace
