// Fault injection: the wall clock of the registry and of a zone server jumps two hours forward,
// then two hours back (libfaketime, which leaves CLOCK_MONOTONIC alone). Leases, heartbeats and
// expiry run on monotonic time, so nothing may happen: the instance stays READY at the same
// generation, no DELETE reaches a watcher, nothing expires. A registration made after the jump
// carries the jumped wall-clock time, which shows the jump took effect.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::Eventually;
using drover::testing::Http;
using json = nlohmann::json;

constexpr const char* kFaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

json Instance(std::uint16_t http, const std::string& service, const std::string& id) {
  const auto list = Http(http, "GET", "/v1/services/" + service + "/instances");
  const json body = json::parse(list.body, nullptr, false);
  if (body.is_object()) {
    for (const json& in : body["instances"]) {
      if (in["id"] == id) return in;
    }
  }
  return nullptr;
}

std::int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(ClockJumpTest, WallClockJumpsChangeNothingThatRunsOnMonotonicTime) {
  if (!std::filesystem::exists(kFaketime)) GTEST_FAIL() << kFaketime << " missing (libfaketime)";
  drover::testing::TempDir dir;
  const std::string offset_file = dir.path() + "/offset";
  auto set_offset = [&](const char* offset) { std::ofstream(offset_file) << offset << "\n"; };
  set_offset("+0");
  // Through env(1): the preload and its settings reach only these children.
  const std::vector<std::string> env = {"/usr/bin/env", std::string("LD_PRELOAD=") + kFaketime,
                                        "FAKETIME_TIMESTAMP_FILE=" + offset_file,
                                        "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"};
  const std::uint16_t http = drover::testing::FreeLoopbackPort();
  const std::string grpc = drover::testing::FreeLoopbackAddress();
  auto with_env = [&](std::vector<std::string> argv) {
    argv.insert(argv.begin(), env.begin(), env.end());
    return argv;
  };
  ChildProcess registry(
      with_env({DROVER_BINARY, "registry", "--data-dir", dir.path() + "/r", "--http",
                "127.0.0.1:" + std::to_string(http), "--grpc", grpc, "--tick-ms", "100"}));
  ASSERT_TRUE(registry.ReadLine(20s).has_value());
  ChildProcess zone(with_env({DROVER_BINARY, "sample", "zone", "--registry", grpc, "--id", "z1",
                              "--listen", drover::testing::FreeLoopbackAddress(), "--health",
                              drover::testing::FreeLoopbackAddress(), "--warmup-ms", "0",
                              "--ttl-ms", "1500", "--log-level", "error"}));
  ASSERT_TRUE(Eventually(
      [&] {
        const json z1 = Instance(http, "zone", "z1");
        return z1.is_object() && z1["state"] == "READY";
      },
      20s));
  const std::uint64_t generation = Instance(http, "zone", "z1")["generation"];
  const auto watch_from = json::parse(Http(http, "GET", "/v1/services").body)["revision"];
  drover::testing::StreamReader watch(
      http, "/v1/watch?service=zone&from=" + std::to_string(watch_from.get<std::uint64_t>()));

  for (const char* jump : {"+2h", "-2h"}) {
    set_offset(jump);
    // Two TTLs: a lease judged by the wall clock would have expired (or been renewed late).
    std::this_thread::sleep_for(3s);
    const json z1 = Instance(http, "zone", "z1");
    ASSERT_FALSE(z1.is_null()) << "z1 expired after a " << jump << " jump";
    EXPECT_EQ(z1["state"], "READY") << jump;
    EXPECT_EQ(z1["generation"], generation) << "z1 re-registered after a " << jump << " jump";
    // The jump is real: what the registry stamps now is two hours off.
    const std::string id = std::string("probe") + (jump[0] == '+' ? "-ahead" : "-behind");
    ASSERT_EQ(Http(http, "PUT", "/v1/services/probe/instances/" + id,
                   R"({"address":"127.0.0.1:1","generation":1,"state":"READY"})")
                  .status,
              200);
    const std::int64_t stamped = Instance(http, "probe", id)["ready_since_ms"];
    const std::int64_t skew_ms = stamped - NowMs();
    std::printf(
        "jump %s: registry stamps %+.2f h off the real clock; z1 READY at generation "
        "%llu\n",
        jump, static_cast<double>(skew_ms) / 3.6e6, static_cast<unsigned long long>(generation));
    EXPECT_GT(std::abs(skew_ms), 3'600'000) << "the clock did not jump";
  }
  // No DELETE of z1 reached the watcher across both jumps.
  const auto lines = watch.Lines(100, 500ms);
  for (const std::string& line : lines) {
    EXPECT_EQ(line.find("\"DELETE\""), std::string::npos) << line;
  }
}

}  // namespace
