// Fault injection: the wall clock of the registry and of a zone server jumps two hours forward,
// then two hours back (libfaketime, which leaves CLOCK_MONOTONIC alone). Leases, heartbeats and
// expiry run on monotonic time, so nothing may happen: the instance stays READY at the same
// generation, no DELETE reaches a watcher, nothing expires. A registration made after the jump
// carries the jumped wall-clock time, which shows the jump took effect.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
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

// A registry and zone servers whose wall clock is offset by the contents of one file, read on
// every call (FAKETIME_NO_CACHE).
class ClockJumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kFaketime)) GTEST_FAIL() << kFaketime << " missing (libfaketime)";
    SetOffset("+0");
    registry_.emplace(
        WithFaketime({DROVER_BINARY, "registry", "--data-dir", dir_.path() + "/r", "--http",
                      "127.0.0.1:" + std::to_string(http_), "--grpc", grpc_, "--tick-ms", "100"}));
    ASSERT_TRUE(registry_->ReadLine(20s).has_value());
  }

  void SetOffset(const char* offset) { std::ofstream(dir_.path() + "/offset") << offset << "\n"; }

  // Through env(1): the preload and its settings reach only these children.
  std::vector<std::string> WithFaketime(std::vector<std::string> argv) const {
    const std::vector<std::string> env = {"/usr/bin/env", std::string("LD_PRELOAD=") + kFaketime,
                                          "FAKETIME_TIMESTAMP_FILE=" + dir_.path() + "/offset",
                                          "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"};
    argv.insert(argv.begin(), env.begin(), env.end());
    return argv;
  }

  std::unique_ptr<ChildProcess> StartZone(const std::string& id,
                                          const std::string& ttl_ms = "1500") const {
    return std::make_unique<ChildProcess>(WithFaketime(
        {DROVER_BINARY, "sample", "zone", "--registry", grpc_, "--id", id, "--listen",
         drover::testing::FreeLoopbackAddress(), "--health", drover::testing::FreeLoopbackAddress(),
         "--warmup-ms", "0", "--ttl-ms", ttl_ms, "--log-level", "error"}));
  }

  // The generation z-`id` holds once READY; 0 if it is not READY within 20 s.
  std::uint64_t ReadyGeneration(const std::string& id) const {
    std::uint64_t generation = 0;
    (void)Eventually(
        [&] {
          const json in = Instance(http_, "zone", id);
          if (!in.is_object() || in["state"] != "READY") return false;
          generation = in["generation"];
          return true;
        },
        20s);
    return generation;
  }

  drover::testing::TempDir dir_;
  const std::uint16_t http_ = drover::testing::FreeLoopbackPort();
  const std::string grpc_ = drover::testing::FreeLoopbackAddress();
  std::optional<ChildProcess> registry_;
};

TEST_F(ClockJumpTest, WallClockJumpsChangeNothingThatRunsOnMonotonicTime) {
  const std::uint16_t http = http_;
  const auto zone = StartZone("z1");
  const std::uint64_t generation = ReadyGeneration("z1");
  ASSERT_NE(generation, 0u);
  const auto watch_from = json::parse(Http(http, "GET", "/v1/services").body)["revision"];
  drover::testing::StreamReader watch(
      http, "/v1/watch?service=zone&from=" + std::to_string(watch_from.get<std::uint64_t>()));

  for (const char* jump : {"+2h", "-2h"}) {
    SetOffset(jump);
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

// The generation of a host is its wall-clock time at start. After the clock stepped back, a
// restarted instance's clock-based generation is below the tombstone its previous incarnation
// left; it must still come up, above that tombstone, and not be fenced out.
TEST_F(ClockJumpTest, AnInstanceRestartedAfterTheClockSteppedBackRegistersAboveItsTombstone) {
  // A 20 s lease: the tombstone outlives the restart (it is kept for one TTL).
  auto zone = StartZone("z1", "20000");
  const std::uint64_t first = ReadyGeneration("z1");
  ASSERT_NE(first, 0u);
  zone->Signal(SIGTERM);  // drains and deregisters: a tombstone at `first`
  EXPECT_EQ(zone->Wait(), 0);
  ASSERT_TRUE(Eventually([&] { return Instance(http_, "zone", "z1").is_null(); }, 10s));

  SetOffset("-2h");
  zone = StartZone("z1", "20000");
  const std::uint64_t second = ReadyGeneration("z1");
  ASSERT_NE(second, 0u) << "the restarted z1 never became READY (fenced by its tombstone?)";
  EXPECT_GT(second, first);
  EXPECT_LT(second, first + 3'600'000) << "raised above the tombstone, not to the real clock";
  std::printf("z1 generation %llu, removed; restarted 2 h back in time as generation %llu\n",
              static_cast<unsigned long long>(first), static_cast<unsigned long long>(second));
}

}  // namespace
