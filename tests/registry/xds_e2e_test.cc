// The registry's xDS server with the real clients it is for: gRPC's own xDS client in C++
// (Debian's libgrpc++, `xds:///whoami` and a bootstrap file) and in Python (Debian's
// python3-grpcio), in front of whoami_server processes. The registry runs on 127.0.0.2, each
// server on an address of its own (127.0.0.3, ...), so nothing works only because everything is
// 127.0.0.1.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "drover/examples/whoami/v1/whoami.grpc.pb.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/registry_process.h"
#include "testing/temp_dir.h"

namespace drover {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::ChildProcess;
namespace pb = drover::examples::whoami::v1;
namespace discovery = envoy::service::discovery::v3;

constexpr const char* kRegistryIp = "127.0.0.2";

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Answers of a client that calls WhoAmI.Who over and over: the instance that answered, or
// "ERR <why>".
class CallStream {
 public:
  virtual ~CallStream() = default;
  virtual std::optional<std::string> Next(Clock::duration timeout) = 0;
};

// The C++ client in this process: one thread calling through an `xds:///whoami` channel (or
// `target`: the channels of one process share one xDS client, and so one ADS stream).
class CppCalls final : public CallStream {
 public:
  explicit CppCalls(const std::string& target = "xds:///whoami") {
    channel_ = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    thread_ = std::jthread([this](std::stop_token stop) {
      auto stub = pb::WhoAmI::NewStub(channel_);
      while (!stop.stop_requested()) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 5s);
        ctx.set_wait_for_ready(true);
        pb::WhoReply reply;
        const grpc::Status st = stub->Who(&ctx, pb::WhoRequest{}, &reply);
        {
          std::lock_guard lock(mu_);
          answers_.push_back(st.ok() ? reply.instance() : "ERR " + st.error_message());
        }
        cv_.notify_all();
        std::this_thread::sleep_for(2ms);
      }
    });
  }
  std::optional<std::string> Next(Clock::duration timeout) override {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !answers_.empty(); })) return std::nullopt;
    std::string next = std::move(answers_.front());
    answers_.pop_front();
    return next;
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> answers_;
  std::jthread thread_;  // last: stops before what it uses goes
};

// Debian's Python, where python3-grpcio is installed (a python3 earlier on PATH may be another).
constexpr const char* kPython = "/usr/bin/python3";

// The Python client: a python3 process printing one answer per line.
class PythonCalls final : public CallStream {
 public:
  PythonCalls(const std::string& script, const std::string& bootstrap)
      : process_({"/usr/bin/env", "GRPC_XDS_BOOTSTRAP=" + bootstrap, kPython, script}) {}
  std::optional<std::string> Next(Clock::duration timeout) override {
    return process_.ReadLine(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  }

 private:
  ChildProcess process_;
};

constexpr const char* kPythonClient = R"(import sys, time
import grpc

channel = grpc.insecure_channel("xds:///whoami")
who = channel.unary_unary("/drover.examples.whoami.v1.WhoAmI/Who",
                          request_serializer=lambda b: b, response_deserializer=lambda b: b)
while True:
    try:
        reply = who(b"", timeout=5, wait_for_ready=True)
        # WhoReply: field 1, the instance id, length-delimited (ids here are short)
        print(reply[2:2 + reply[1]].decode() if len(reply) > 2 else "", flush=True)
    except grpc.RpcError as e:
        print("ERR " + str(e.code()), flush=True)
        time.sleep(0.05)
    time.sleep(0.002)
)";

class XdsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = testing::StartRegistryProcess(
        DROVER_BINARY,
        {"--data-dir", dir_.path() + "/data", "--http", std::string(kRegistryIp) + ":0", "--grpc",
         std::string(kRegistryIp) + ":0", "--xds", std::string(kRegistryIp) + ":0"});
    http_ = registry_.http;
    grpc_ = registry_.grpc;
    xds_ = registry_.xds;
    ASSERT_NE(xds_, 0) << registry_.line;
    bootstrap_ = dir_.path() + "/xds-bootstrap.json";
    std::ofstream(bootstrap_) << nlohmann::json{
        {"xds_servers",
         {{{"server_uri", std::string(kRegistryIp) + ":" + std::to_string(xds_)},
           {"channel_creds", {{{"type", "insecure"}}}},
           {"server_features", {"xds_v3"}}}}},
        {"node",
         {{"id", "xds-e2e-test"}}}}.dump();
  }

  // A whoami_server on its own loopback address, registered with the registry when READY.
  void StartServer(const std::string& id, const std::string& ip,
                   const std::string& service = "whoami") {
    servers_[id] = std::make_unique<ChildProcess>(std::vector<std::string>{
        WHOAMI_SERVER_BINARY, "--registry", std::string(kRegistryIp) + ":" + std::to_string(grpc_),
        "--service", service, "--id", id, "--listen", ip + ":0", "--health", ip + ":0",
        "--log-level", "warn"});
    const auto line = servers_[id]->ReadLine(20s);
    ASSERT_TRUE(line && line->find("serving gRPC at " + ip) != std::string::npos)
        << id << ": " << line.value_or("(nothing)");
  }

  nlohmann::json Instances(const std::string& service = "whoami") {
    const auto reply =
        testing::HttpTo(kRegistryIp, http_, "GET", "/v1/services/" + service + "/instances");
    if (reply.status != 200) return nlohmann::json::array();
    return nlohmann::json::parse(reply.body)["instances"];
  }
  bool Ready(const std::set<std::string>& ids, const std::string& service = "whoami") {
    std::set<std::string> ready;
    for (const auto& in : Instances(service)) {
      if (in["state"] == "READY") ready.insert(in["id"].get<std::string>());
    }
    return std::includes(ready.begin(), ready.end(), ids.begin(), ids.end());
  }

  void Drain(const std::string& id) {
    for (const auto& in : Instances()) {
      if (in["id"] != id) continue;
      const auto reply = testing::HttpTo(
          kRegistryIp, http_, "POST", "/v1/services/whoami/instances/" + id + "/state",
          nlohmann::json{{"generation", in["generation"]}, {"state", "DRAINING"}}.dump());
      ASSERT_EQ(reply.status, 200) << reply.body;
      return;
    }
    FAIL() << id << " is not registered";
  }

  // The issue's scenario, whatever the client: 300 calls spread over three READY servers, one
  // set DRAINING stops getting calls after the push, two added start getting them.
  void Scenario(CallStream& calls, const std::string& who) {
    for (auto [id, ip] : {std::pair{"w1", "127.0.0.3"}, std::pair{"w2", "127.0.0.4"},
                          std::pair{"w3", "127.0.0.5"}}) {
      StartServer(id, ip);
    }
    ASSERT_TRUE(testing::Eventually([&] { return Ready({"w1", "w2", "w3"}); }, 20s, 20ms));

    // Until the client has reached all three (its xDS client fetched listener, cluster and
    // endpoints), then 300 counted calls.
    std::set<std::string> seen;
    const auto warm_deadline = Clock::now() + 30s;
    while (seen.size() < 3 && Clock::now() < warm_deadline) {
      if (auto a = calls.Next(5s); a && a->rfind("ERR", 0) != 0) seen.insert(*a);
    }
    ASSERT_EQ(seen.size(), 3u) << who << " never reached all three servers";
    std::map<std::string, int> counts;
    for (int i = 0; i < 300; ++i) {
      auto a = calls.Next(10s);
      ASSERT_TRUE(a.has_value()) << who << ": no answer";
      ++counts[*a];
    }
    std::printf("%s: 300 calls: w1 %d, w2 %d, w3 %d\n", who.c_str(), counts["w1"], counts["w2"],
                counts["w3"]);
    EXPECT_EQ(counts.size(), 3u) << who;
    for (const char* id : {"w1", "w2", "w3"}) {
      EXPECT_GE(counts[id], 90) << who << " " << id;
      EXPECT_LE(counts[id], 110) << who << " " << id;
    }

    // w2 DRAINING: the push carries it as DRAINING; the client stops picking it.
    Drain("w2");
    const auto drained_at = Clock::now();
    auto last_w2 = Clock::time_point{};
    int failed = 0;
    while (Clock::now() - drained_at < 4s) {
      auto a = calls.Next(5s);
      ASSERT_TRUE(a.has_value()) << who;
      if (*a == "w2") last_w2 = Clock::now();
      if (a->rfind("ERR", 0) == 0) ++failed;
    }
    const double drain_delay = last_w2 == Clock::time_point{} ? 0 : Seconds(last_w2 - drained_at);
    if (last_w2 == Clock::time_point{}) {
      std::printf(
          "%s: no call on the drained server once it was set DRAINING (the push came "
          "before the next call)\n",
          who.c_str());
    } else {
      std::printf("%s: last call on the drained server %.3f s after it was set DRAINING\n",
                  who.c_str(), drain_delay);
    }
    EXPECT_LT(drain_delay, 3.0) << who;
    EXPECT_EQ(failed, 0) << who;

    // Two servers added: each gets calls once its endpoint is pushed.
    StartServer("w4", "127.0.0.6");
    StartServer("w5", "127.0.0.7");
    ASSERT_TRUE(testing::Eventually([&] { return Ready({"w4", "w5"}); }, 20s, 20ms));
    const auto added_at = Clock::now();
    std::map<std::string, double> first;
    while (first.size() < 2 && Clock::now() - added_at < 10s) {
      auto a = calls.Next(5s);
      ASSERT_TRUE(a.has_value()) << who;
      EXPECT_NE(*a, "w2") << who << ": the drained server got a call";
      if ((*a == "w4" || *a == "w5") && !first.count(*a))
        first[*a] = Seconds(Clock::now() - added_at);
    }
    ASSERT_EQ(first.size(), 2u) << who << ": the added servers got no call within 10 s";
    std::printf("%s: first calls on the added servers %.3f s and %.3f s after they were READY\n",
                who.c_str(), first["w4"], first["w5"]);
    EXPECT_LT(first["w4"], 3.0) << who;
    EXPECT_LT(first["w5"], 3.0) << who;
  }

  testing::TempDir dir_;
  testing::RegistryProcess registry_;
  std::uint16_t http_ = 0;
  std::uint16_t grpc_ = 0;
  std::uint16_t xds_ = 0;
  std::string bootstrap_;
  std::map<std::string, std::unique_ptr<ChildProcess>> servers_;
};

TEST_F(XdsE2eTest, GrpcCppFollowsTheRegistryOverXds) {
  // Read by gRPC when the first xds: channel is made; this test's process has no other.
  ::setenv("GRPC_XDS_BOOTSTRAP", bootstrap_.c_str(), 1);
  CppCalls calls;
  Scenario(calls, "C++ grpc");
}

// Two services followed over one ADS stream: when one's endpoints change, the registry sends that
// one ClusterLoadAssignment alone (a left-out one is unchanged, as gRFC A27 reads the protocol),
// and the client keeps calling the other service's server without a single failure.
TEST_F(XdsE2eTest, GrpcCppKeepsOneServicesEndpointsWhileAnotherOnesChange) {
  ::setenv("GRPC_XDS_BOOTSTRAP", bootstrap_.c_str(), 1);
  StartServer("w1", "127.0.0.3");
  StartServer("o1", "127.0.0.4", "other");
  ASSERT_TRUE(
      testing::Eventually([&] { return Ready({"w1"}) && Ready({"o1"}, "other"); }, 20s, 20ms));
  CppCalls whoami("xds:///whoami");
  CppCalls other("xds:///other");
  const auto until = [](CallStream& calls, const std::string& want) {
    const auto deadline = Clock::now() + 30s;
    while (Clock::now() < deadline) {
      if (auto a = calls.Next(5s); a && *a == want) return true;
    }
    return false;
  };
  ASSERT_TRUE(until(whoami, "w1"));
  ASSERT_TRUE(until(other, "o1"));

  StartServer("w2", "127.0.0.5");
  ASSERT_TRUE(testing::Eventually([&] { return Ready({"w2"}); }, 20s, 20ms));
  ASSERT_TRUE(until(whoami, "w2")) << "the added whoami server got no call";
  Drain("w1");
  // Calls on "other" through both changes and a second after: every one answered by o1.
  const auto changed_at = Clock::now();
  int calls = 0;
  while (Clock::now() - changed_at < 1s) {
    auto a = other.Next(5s);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a, "o1");
    ++calls;
  }
  EXPECT_GT(calls, 10);
  std::printf("other: %d calls after whoami's endpoints changed twice, all on o1\n", calls);
}

TEST_F(XdsE2eTest, GrpcPythonFollowsTheRegistryOverXds) {
  ASSERT_EQ(std::system((std::string(kPython) + " -c 'import grpc' 2>/dev/null").c_str()), 0)
      << "python3-grpcio is missing: scripts/setup.sh installs it";
  const std::string script = dir_.path() + "/whoami_client.py";
  std::ofstream(script) << kPythonClient;
  PythonCalls calls(script, bootstrap_);
  Scenario(calls, "Python grpcio");
}

// A raw ADS stream, as a client of the server's own protos.
struct AdsClient {
  explicit AdsClient(std::shared_ptr<grpc::Channel> channel)
      : stub(discovery::AggregatedDiscoveryService::NewStub(std::move(channel))) {
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    stream = stub->StreamAggregatedResources(&ctx);
  }
  std::unique_ptr<discovery::AggregatedDiscoveryService::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<
      grpc::ClientReaderWriter<discovery::DiscoveryRequest, discovery::DiscoveryResponse>>
      stream;
};

discovery::DiscoveryRequest ListenerRequest(const std::string& name) {
  discovery::DiscoveryRequest r;
  r.set_type_url("type.googleapis.com/envoy.config.listener.v3.Listener");
  r.add_resource_names(name);
  r.mutable_node()->set_id("raw-client");
  return r;
}

TEST_F(XdsE2eTest, MalformedRequestsAndUnknownTypesAreRefusedAndTheServerGoesOn) {
  StartServer("w1", "127.0.0.3");
  ASSERT_TRUE(testing::Eventually([&] { return Ready({"w1"}); }, 20s, 20ms));
  const std::string target = std::string(kRegistryIp) + ":" + std::to_string(xds_);
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  {
    // Bytes that are no DiscoveryRequest: gRPC cannot decode them and ends the call.
    grpc::GenericStub generic(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    grpc::CompletionQueue cq;
    auto call = generic.PrepareCall(
        &ctx, "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
        &cq);
    void* tag = nullptr;
    bool ok = false;
    call->StartCall(reinterpret_cast<void*>(1));
    ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
    const std::string garbage = "\xff\xff\xff\xff\x0f this is not protobuf";
    grpc::Slice slice(garbage);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, reinterpret_cast<void*>(2));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(3));
    while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(3)) {
    }
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("is not an envoy.service.discovery.v3.DiscoveryRequest"),
              std::string::npos)
        << status.error_message();
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  // A type nobody serves gets no answer; the listener asked next on the same stream does.
  AdsClient client(channel);
  discovery::DiscoveryRequest odd;
  odd.set_type_url("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret");
  odd.add_resource_names("x");
  ASSERT_TRUE(client.stream->Write(odd));
  ASSERT_TRUE(client.stream->Write(ListenerRequest("whoami")));
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(client.stream->Read(&response));
  EXPECT_EQ(response.type_url(), "type.googleapis.com/envoy.config.listener.v3.Listener");
  EXPECT_EQ(response.resources_size(), 1);
  // The registry's /metrics counts the stream: this one. The malformed one's count drops when
  // gRPC lets go of its call, which can come after its client had the status.
  std::string metrics;
  EXPECT_TRUE(testing::Eventually(
      [&] {
        metrics = testing::HttpTo(kRegistryIp, http_, "GET", "/metrics").body;
        return metrics.find("drover_registry_xds_streams 1") != std::string::npos;
      },
      5s, 20ms))
      << metrics;
}

TEST_F(XdsE2eTest, StreamsBeyondTheLimitAndPeersOutsideTheAllowListAreRefused) {
  testing::TempDir dir;
  auto limited = testing::StartRegistryProcess(
      DROVER_BINARY, {"--data-dir", dir.path() + "/data", "--http", "127.0.0.1:0", "--grpc", "off",
                      "--xds", "127.0.0.1:0", "--xds-max-streams-per-client", "2"});
  const std::uint16_t port = limited.xds;
  ASSERT_NE(port, 0) << limited.line;
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  std::vector<std::unique_ptr<AdsClient>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<AdsClient>(channel));
    clients.back()->stream->Write(ListenerRequest("whoami"));
  }
  // Two get an answer (an empty one: no such service yet); the third is refused -- whichever
  // the registry saw third: the three streams start together on one connection, in any order.
  discovery::DiscoveryResponse response;
  int answered = 0;
  std::size_t refused_one = clients.size();
  for (std::size_t i = 0; i < clients.size(); ++i) {
    if (clients[i]->stream->Read(&response)) {
      ++answered;
    } else {
      refused_one = i;
    }
  }
  EXPECT_EQ(answered, 2);
  ASSERT_LT(refused_one, clients.size());
  const grpc::Status refused = clients[refused_one]->stream->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("--xds-max-streams-per-client"), std::string::npos);

  testing::TempDir dir2;
  auto walled = testing::StartRegistryProcess(
      DROVER_BINARY, {"--data-dir", dir2.path() + "/data", "--http", "127.0.0.1:0", "--grpc", "off",
                      "--xds", "127.0.0.1:0", "--xds-allow", "10.0.0.0/8"});
  const std::uint16_t walled_port = walled.xds;
  ASSERT_NE(walled_port, 0) << walled.line;
  AdsClient outsider(grpc::CreateChannel("127.0.0.1:" + std::to_string(walled_port),
                                         grpc::InsecureChannelCredentials()));
  outsider.stream->Write(ListenerRequest("whoami"));
  EXPECT_FALSE(outsider.stream->Read(&response));
  const grpc::Status denied = outsider.stream->Finish();
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED) << denied.error_message();

  const auto bad = testing::StartRegistryProcess(
      DROVER_BINARY, {"--data-dir", dir2.path() + "/bad", "--http", "127.0.0.1:0", "--grpc", "off",
                      "--xds", "127.0.0.1:0", "--xds-allow", "10.0.0.0/40"});
  const int status = bad.child->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2)
      << "a bad --xds-allow is a usage error";
}

}  // namespace
}  // namespace drover
