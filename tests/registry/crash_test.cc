// Durability end to end: a real `drover registry` process acknowledges 1,000 registrations, is
// killed with SIGKILL, and a new process on the same data directory still has all of them; and
// the same while many clients write at once over gRPC and over HTTP keep-alive connections (their
// writes share commits: group commit), killed in the middle of their writing.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "drover/registry/v1/registry.grpc.pb.h"
#include "testing/child_process.h"
#include "testing/http_client.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::Http;

// Starts the registry and returns its HTTP port (and its gRPC port in `grpc`), read from the
// first stdout line (0 on failure).
std::uint16_t StartRegistry(ChildProcess& child, std::uint16_t* grpc = nullptr) {
  auto line = child.ReadLine(20s);
  if (!line) return 0;
  std::smatch m;
  if (grpc != nullptr) {
    if (!std::regex_search(*line, m, std::regex(R"(grpc://127\.0\.0\.1:(\d+))"))) return 0;
    *grpc = static_cast<std::uint16_t>(std::stoi(m[1]));
  }
  if (!std::regex_search(*line, m, std::regex(R"(http://127\.0\.0\.1:(\d+))"))) return 0;
  return static_cast<std::uint16_t>(std::stoi(m[1]));
}

// A registry on `data_dir`; port 0 for both APIs: a fixed default port could be anyone's.
std::vector<std::string> RegistryArgv(const std::string& data_dir) {
  return {DROVER_BINARY, "registry",    "--data-dir", data_dir,
          "--http",      "127.0.0.1:0", "--grpc",     "127.0.0.1:0"};
}

TEST(RegistryCrashTest, AcknowledgedWritesSurviveSigkill) {
  drover::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<std::string> argv = RegistryArgv(dir.path());
  constexpr int kWrites = 1000;
  {
    ChildProcess registry(argv);
    const std::uint16_t port = StartRegistry(registry);
    ASSERT_NE(port, 0);
    for (int i = 0; i < kWrites; ++i) {
      const std::string body = R"({"address":"127.0.0.1:)" + std::to_string(10000 + i) +
                               R"(","generation":)" + std::to_string(i + 1) +
                               R"(,"state":"READY","ttl_ms":600000})";
      auto reply = Http(port, "PUT", "/v1/services/crash/instances/i" + std::to_string(i), body);
      ASSERT_EQ(reply.status, 200) << "write " << i << ": " << reply.body;
    }
    registry.Signal(SIGKILL);
    const int status = registry.Wait();
    ASSERT_TRUE(WIFSIGNALED(status));
    ASSERT_EQ(WTERMSIG(status), SIGKILL);
  }
  ChildProcess restarted(argv);
  const std::uint16_t port = StartRegistry(restarted);
  ASSERT_NE(port, 0);
  auto reply = Http(port, "GET", "/v1/services/crash/instances");
  ASSERT_EQ(reply.status, 200);
  auto body = nlohmann::json::parse(reply.body);
  EXPECT_EQ(body["revision"], kWrites);
  ASSERT_EQ(body["instances"].size(), static_cast<std::size_t>(kWrites));
  std::set<std::string> ids;
  for (const auto& in : body["instances"]) {
    ids.insert(in["id"].get<std::string>());
    const int i = std::stoi(in["id"].get<std::string>().substr(1));
    EXPECT_EQ(in["generation"], i + 1);
    EXPECT_EQ(in["address"], "127.0.0.1:" + std::to_string(10000 + i));
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kWrites));
  // And it still serves writes, with the revision continuing where it stopped.
  auto next = Http(port, "PUT", "/v1/services/crash/instances/after",
                   R"({"address":"127.0.0.1:9","generation":1})");
  EXPECT_EQ(nlohmann::json::parse(next.body)["revision"], kWrites + 1);
  restarted.Signal(SIGTERM);
  EXPECT_EQ(restarted.Wait(), 0);
}

// Registrations PUT one after another on one keep-alive connection, as the SDK sends them, each
// id added to `acknowledged` once its 200 came; returns at the first write that fails (the
// registry gone).
void HttpWriter(std::uint16_t port, int w, std::vector<std::string>& acknowledged,
                std::atomic<int>& total) {
  const int fd = drover::testing::ConnectLoopback(port);
  if (fd < 0) return;
  std::string in;
  char buf[4096];
  for (int i = 0;; ++i) {
    const std::string id = "h" + std::to_string(w) + "-" + std::to_string(i);
    const std::string body = R"({"address":"127.0.0.1:)" + std::to_string(10000 + i % 50000) +
                             R"(","generation":)" + std::to_string(i + 1) + R"(,"ttl_ms":600000})";
    const std::string request =
        "PUT /v1/services/crash/instances/" + id +
        " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    if (!drover::testing::SendAll(fd, request)) break;
    // The answer: its head, then Content-Length bytes.
    std::size_t head_end = std::string::npos, length = 0;
    while (true) {
      head_end = in.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const std::size_t at = in.find("Content-Length: ");
        if (at == std::string::npos || at > head_end) break;
        length = std::stoul(in.substr(at + 16));
        if (in.size() >= head_end + 4 + length) break;
      }
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        ::close(fd);
        return;
      }
      in.append(buf, static_cast<std::size_t>(n));
    }
    const bool ok = in.rfind("HTTP/1.1 200 ", 0) == 0;
    in.erase(0, head_end + 4 + length);
    if (!ok) break;
    acknowledged.push_back(id);
    total.fetch_add(1);
  }
  ::close(fd);
}

TEST(RegistryCrashTest, AcknowledgedWritesSurviveSigkillUnderConcurrentWriters) {
  drover::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<std::string> argv = RegistryArgv(dir.path());
  constexpr int kWriters = 16;     // over gRPC
  constexpr int kHttpWriters = 8;  // over HTTP keep-alive connections
  std::vector<std::vector<std::string>> acknowledged(kWriters + kHttpWriters);
  std::atomic<int> total{0};
  {
    ChildProcess registry(argv);
    std::uint16_t grpc_port = 0;
    const std::uint16_t http_port = StartRegistry(registry, &grpc_port);
    ASSERT_NE(http_port, 0);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port),
                                       grpc::InsecureChannelCredentials());
    auto stub = drover::registry::v1::Registry::NewStub(channel);
    std::vector<std::jthread> writers;
    for (int h = 0; h < kHttpWriters; ++h) {
      writers.emplace_back([&, h] {
        HttpWriter(http_port, h, acknowledged[static_cast<std::size_t>(kWriters + h)], total);
      });
    }
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        // As fast as it can, until the registry is gone.
        for (int i = 0;; ++i) {
          drover::registry::v1::RegisterRequest req;
          req.set_service("crash");
          req.set_id("w" + std::to_string(w) + "-" + std::to_string(i));
          req.mutable_spec()->set_address("127.0.0.1:" + std::to_string(10000 + i % 50000));
          req.mutable_spec()->set_generation(static_cast<std::uint64_t>(i + 1));
          req.mutable_spec()->set_ttl_ms(600000);
          drover::registry::v1::RevisionReply reply;
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + 5s);
          if (!stub->Register(&ctx, req, &reply).ok()) return;
          acknowledged[static_cast<std::size_t>(w)].push_back(req.id());
          total.fetch_add(1);
        }
      });
    }
    // Killed in the middle of the writing, once a good number of writes are in.
    for (int i = 0; i < 3000 && total.load() < 2000; ++i) std::this_thread::sleep_for(5ms);
    ASSERT_GE(total.load(), 2000) << "the writers made too little progress";
    registry.Signal(SIGKILL);
    const int status = registry.Wait();
    ASSERT_TRUE(WIFSIGNALED(status));
    writers.clear();  // each stops at its first failed write
  }
  ChildProcess restarted(argv);
  const std::uint16_t port = StartRegistry(restarted);
  ASSERT_NE(port, 0);
  auto reply = Http(port, "GET", "/v1/services/crash/instances");
  ASSERT_EQ(reply.status, 200);
  std::set<std::string> stored;
  const auto body = nlohmann::json::parse(reply.body);
  for (const auto& in : body["instances"]) {
    stored.insert(in["id"].get<std::string>());
  }
  std::size_t missing = 0;
  for (const auto& ids : acknowledged) {
    for (const std::string& id : ids) missing += !stored.contains(id);
  }
  EXPECT_EQ(missing, 0u) << "of " << total.load() << " acknowledged writes";
  // Nothing was stored that no writer sent (a write in flight at the kill may or may not be).
  EXPECT_LE(stored.size(), static_cast<std::size_t>(total.load() + kWriters + kHttpWriters));
  std::size_t over_http = 0;
  for (int h = 0; h < kHttpWriters; ++h) {
    over_http += acknowledged[static_cast<std::size_t>(kWriters + h)].size();
  }
  std::printf("acknowledged before the kill: %d, %zu of them over HTTP\n", total.load(), over_http);
  // Both kinds of writer got writes in before the kill.
  EXPECT_FALSE(acknowledged.front().empty());
  EXPECT_FALSE(acknowledged.back().empty());
  restarted.Signal(SIGTERM);
  EXPECT_EQ(restarted.Wait(), 0);
}

}  // namespace
