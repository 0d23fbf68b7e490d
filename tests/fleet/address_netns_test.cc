// The address rule end to end, on a machine of its own: this test process enters a network
// namespace it creates (root, or a user namespace that allows it; otherwise the test is skipped
// with the reason, and never touches the machine's real interfaces), gives it one interface with
// 10.77.0.1 -- a dummy interface, or where the kernel has no dummy driver a veth pair, both ends
// inside -- and then, with a registry listening on that address:
//   - a zone server listening on 0.0.0.0 registers 10.77.0.1 (its machine's routable address),
//     and so does its health probe;
//   - a zone server advertising 127.0.0.1 to that registry is refused at start, saying why.
// One test per process (ctest runs each alone), since the namespace is the whole process's.
#include <gtest/gtest.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/port_in.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::RunCommand;

constexpr const char* kAddress = "10.77.0.1";

// Sets up the namespace's interfaces; empty on success, else why not.
std::string MakeInterface() {
  if (RunCommand("ip link set lo up").exit_code != 0) return "cannot bring lo up";
  if (RunCommand("ip link add d0 type dummy").exit_code == 0) {
    if (RunCommand(std::string("ip addr add ") + kAddress + "/24 dev d0 && ip link set d0 up")
            .exit_code != 0) {
      return "cannot configure the dummy interface";
    }
    return "";
  }
  const auto veth =
      RunCommand(std::string("ip link add v0 type veth peer name v1 && ip addr add ") + kAddress +
                 "/24 dev v0 && ip link set v1 up && ip link set v0 up");
  return veth.exit_code == 0 ? "" : "neither a dummy nor a veth interface: " + veth.out;
}

TEST(AddressNetnsTest, ARoutableAddressIsAdvertisedAndALoopbackOneRefused) {
  if (::unshare(CLONE_NEWNET) != 0) {
    GTEST_SKIP() << "cannot create a network namespace here (" << std::strerror(errno)
                 << "); the address rule is covered by AddressRuleTest's table";
  }
  if (const std::string why = MakeInterface(); !why.empty()) {
    GTEST_SKIP() << "cannot make an interface in the namespace: " << why;
  }
  drover::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  drover::testing::ChildProcess registry(
      {DROVER_BINARY, "registry", "--data-dir", dir.path() + "/registry", "--http",
       std::string(kAddress) + ":7070", "--grpc", std::string(kAddress) + ":7071"});
  const auto line = registry.ReadLine(20s);
  ASSERT_TRUE(line.has_value());
  const std::string grpc = std::string(kAddress) + ":7071";

  drover::testing::ChildProcess zone({DROVER_BINARY, "sample", "zone", "--registry", grpc, "--id",
                                      "z-any", "--listen", "0.0.0.0:9001", "--health",
                                      "0.0.0.0:9101", "--warmup-ms", "0"});
  nlohmann::json instance;
  ASSERT_TRUE(drover::testing::Eventually(
      [&] {
        const auto list =
            drover::testing::HttpTo(kAddress, 7070, "GET", "/v1/services/zone/instances");
        const auto body = nlohmann::json::parse(list.body, nullptr, false);
        if (!body.is_object() || body["instances"].empty()) return false;
        instance = body["instances"][0];
        return true;
      },
      20s));
  EXPECT_EQ(instance["address"], std::string(kAddress) + ":9001") << instance.dump();
  EXPECT_EQ(instance["labels"]["drover.health"], std::string(kAddress) + ":9101")
      << instance.dump();

  const auto refused =
      RunCommand(std::string("timeout 20 ") + DROVER_BINARY + " sample zone --registry " + grpc +
                 " --id z-lo --listen 127.0.0.1:9002 --health 127.0.0.1:9102 "
                 "--warmup-ms 0");
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_NE(refused.out.find("127.0.0.1:9002 is loopback, but the registry at " + grpc + " is not"),
            std::string::npos)
      << refused.out;
  std::printf(
      "in a network namespace: the zone server on 0.0.0.0 registered %s; the one on "
      "127.0.0.1 was refused: %s\n",
      instance["address"].get<std::string>().c_str(),
      refused.out.substr(refused.out.find("is loopback")).substr(0, 120).c_str());
}

}  // namespace
