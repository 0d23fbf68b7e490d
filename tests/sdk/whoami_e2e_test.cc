// Seed 003 with server processes: `drover registry` and `whoami_server`s, Drover's channel in the
// test. A server frozen by SIGSTOP (no FIN, no GOAWAY) is found dead by keepalive and calls go
// to the others; a server shutting down leaves discovery first, gets no new calls after that,
// and finishes the call it had in flight.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <future>
#include <iostream>
#include <map>
#include <regex>
#include <thread>

#include "drover/examples/whoami/v1/whoami.grpc.pb.h"
#include "drover/grpc.h"
#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/registry_process.h"
#include "testing/temp_dir.h"

namespace drover::grpc_defaults {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
namespace pb = drover::examples::whoami::v1;
using SteadyTime = std::chrono::steady_clock::time_point;

class WhoAmIE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = drover::testing::StartRegistryProcess(
        DROVER_BINARY,
        {"--data-dir", dir_.path(), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
    ASSERT_NE(registry_.grpc, 0) << registry_.line;
    grpc_ = registry_.grpc_address();
  }

  // Starts a whoami_server; returns its gRPC address.
  std::string Server(const std::string& id, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        WHOAMI_SERVER_BINARY,    "--registry", grpc_,         "--id", id,
        "--keepalive-permit-ms", "200",        "--log-level", "warn"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    servers_[id] = std::make_unique<ChildProcess>(argv);
    const auto line = servers_[id]->ReadLine(20s);
    std::smatch m;
    if (!line || !std::regex_search(*line, m, std::regex(R"(at (127\.0\.0\.1:\d+))"))) return "";
    return m[1].str();
  }

  std::unique_ptr<ServiceChannel> Channel(const ChannelOptions& options, std::size_t instances) {
    DiscoveryOptions d;
    d.registry = grpc_;
    d.service = "whoami";
    auto ch = ServiceChannel::Start(d, options, clock_).value();
    EXPECT_TRUE(testing::Eventually(
        [&] {
          const std::string t = ch->target();
          return !t.empty() &&
                 static_cast<std::size_t>(std::count(t.begin(), t.end(), ',')) + 1 == instances;
        },
        20s));
    return ch;
  }

  testing::TempDir dir_;
  RealClock clock_;
  drover::testing::RegistryProcess registry_;
  std::string grpc_;
  std::map<std::string, std::unique_ptr<ChildProcess>> servers_;
};

struct CallRecord {
  SteadyTime at;
  bool ok;
  std::string who;
};

TEST_F(WhoAmIE2eTest, AFrozenServerIsFoundDeadByKeepaliveAndCallsMoveOn) {
  for (const char* id : {"w1", "w2", "w3"}) ASSERT_FALSE(Server(id, {"--ttl-ms", "60000"}).empty());
  ChannelOptions options;
  options.keepalive_time = 1s;
  options.keepalive_timeout = 1s;
  options.deadline = 300ms;
  auto channel = Channel(options, 3);
  std::vector<CallRecord> records;
  std::mutex mu;
  std::atomic<bool> run{true};
  std::vector<std::jthread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      while (run) {
        auto ch = channel->Get();
        if (!ch.ok()) continue;
        grpc::ClientContext ctx;
        SetDeadline(ctx, options);
        pb::WhoReply reply;
        const grpc::Status st = pb::WhoAmI::NewStub(*ch)->Who(&ctx, pb::WhoRequest{}, &reply);
        const bool ok = st.ok();
        {
          std::lock_guard lock(mu);
          records.push_back(
              {std::chrono::steady_clock::now(), ok, ok ? reply.instance() : st.error_message()});
        }
        std::this_thread::sleep_for(10ms);
      }
    });
  }
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(servers_["w2"]->Freeze());  // no FIN, no GOAWAY: as a hung or partitioned host
  const SteadyTime frozen = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(6s);
  run = false;
  callers.clear();
  servers_["w2"]->Signal(SIGCONT);

  SteadyTime last_failure = frozen;
  int failures = 0, after_detection_ok = 0, after_detection_failed = 0;
  std::map<std::string, int> late;
  for (const CallRecord& r : records) {
    if (r.at < frozen) continue;
    if (!r.ok) {
      ++failures;
      last_failure = std::max(last_failure, r.at);
    }
  }
  const double detected = std::chrono::duration<double>(last_failure - frozen).count();
  // keepalive time + timeout = 2 s, plus a margin for the ping schedule and the call deadline.
  EXPECT_LT(detected, 4.0);
  for (const CallRecord& r : records) {
    if (r.at < frozen + 4s) continue;
    (r.ok ? after_detection_ok : after_detection_failed)++;
    if (r.ok) ++late[r.who];
  }
  EXPECT_EQ(after_detection_failed, 0);
  EXPECT_GT(after_detection_ok, 50);
  EXPECT_EQ(late.count("w2"), 0u);
  std::cout << "frozen server: calls failed for " << detected << " s after SIGSTOP (" << failures
            << " failures, each bounded by the 300 ms deadline; keepalive 1 s + 1 s), then "
            << after_detection_ok << " calls without a failure\n";
}

TEST_F(WhoAmIE2eTest, ADrainingServerGetsNoNewCallsAndFinishesTheOneInFlight) {
  std::string drained;
  for (const char* id : {"d1", "d2", "d3"}) {
    const std::string a = Server(id, {"--propagation-ms", "500", "--drain-ms", "5000"});
    ASSERT_FALSE(a.empty());
    if (std::string(id) == "d2") drained = a;
  }
  auto channel = Channel(ChannelOptions{}, 3);
  // A slow call in flight on d2 when it is told to stop.
  auto slow = std::async(std::launch::async, [&] {
    auto stub =
        pb::WhoAmI::NewStub(grpc::CreateChannel(drained, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    pb::WhoRequest req;
    req.set_delay_ms(1500);
    pb::WhoReply reply;
    const grpc::Status s = stub->Who(&ctx, req, &reply);
    return s.ok() ? reply.instance() : "failed: " + s.error_message();
  });
  std::this_thread::sleep_for(300ms);
  servers_["d2"]->Signal(SIGTERM);
  const SteadyTime told = std::chrono::steady_clock::now();
  std::vector<CallRecord> records;
  while (std::chrono::steady_clock::now() < told + 2s) {
    auto ch = channel->Get();
    ASSERT_TRUE(ch.ok());
    grpc::ClientContext ctx;
    SetDeadline(ctx, ChannelOptions{});
    pb::WhoReply reply;
    const bool ok = pb::WhoAmI::NewStub(*ch)->Who(&ctx, pb::WhoRequest{}, &reply).ok();
    records.push_back({std::chrono::steady_clock::now(), ok, reply.instance()});
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(slow.get(), "d2");  // finished, not cut
  int failed = 0, to_d2_late = 0;
  for (const CallRecord& r : records) {
    failed += r.ok ? 0 : 1;
    // Out of discovery at once; the channel follows within its 50 ms poll.
    if (r.at > told + 300ms && r.who == "d2") ++to_d2_late;
  }
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(to_d2_late, 0);
  const int status = servers_["d2"]->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace drover::grpc_defaults
