// The registry's DNS with the real clients it is for: `dig` (Debian bind9-dnsutils) and HAProxy's
// resolvers following SRV records with server-template. The registry runs as a process on its
// own loopback address (127.0.0.2), each zone server on another (127.0.0.3...), so nothing here
// works only because everything is 127.0.0.1.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/port_in.h"
#include "testing/registry_process.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace drover {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::PortIn;

constexpr const char* kRegistryIp = "127.0.0.2";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  for (char c : text) {
    if (c == '\n') {
      if (!line.empty()) lines.push_back(line);
      line.clear();
    } else {
      line.push_back(c);
    }
  }
  if (!line.empty()) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  return lines;
}

class DnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists("/usr/bin/dig"))
        << "dig is missing: scripts/setup.sh installs Debian's bind9-dnsutils";
    registry_ = testing::StartRegistryProcess(
        DROVER_BINARY,
        {"--data-dir", dir_.path() + "/data", "--http", std::string(kRegistryIp) + ":0", "--grpc",
         std::string(kRegistryIp) + ":0", "--dns", std::string(kRegistryIp) + ":0"});
    http_ = registry_.http;
    grpc_ = registry_.grpc;
    dns_ = registry_.dns;
    ASSERT_NE(dns_, 0) << registry_.line;
    ASSERT_NE(http_, 0) << registry_.line;
  }

  void Register(const std::string& service, const std::string& id, const std::string& address,
                const std::string& state = "READY") {
    const auto reply =
        testing::HttpTo(kRegistryIp, http_, "PUT", "/v1/services/" + service + "/instances/" + id,
                        R"({"address":")" + address + R"(","generation":1,"state":")" + state +
                            R"(","ttl_ms":600000})");
    ASSERT_EQ(reply.status, 200) << reply.body;
  }

  testing::CommandResult Dig(const std::string& args) {
    return testing::RunCommand("dig @" + std::string(kRegistryIp) + " -p " + std::to_string(dns_) +
                               " +time=2 +tries=1 " + args);
  }

  testing::TempDir dir_;
  testing::RegistryProcess registry_;
  std::uint16_t http_ = 0;
  std::uint16_t grpc_ = 0;
  std::uint16_t dns_ = 0;
};

TEST_F(DnsTest, DigGetsTheReadyInstancesAsSrvAndAddressRecords) {
  Register("zone", "z1", "127.0.0.3:9001");
  Register("zone", "z2", "127.0.0.4:9002");
  Register("zone", "z3", "127.0.0.5:9003", "STARTING");
  Register("zone", "z4", "127.0.0.6:9004", "DRAINING");

  const auto srv = Dig("zone.service.drover SRV +short");
  ASSERT_EQ(srv.exit_code, 0) << srv.out;
  EXPECT_EQ(Lines(srv.out), (std::vector<std::string>{"0 1 9001 z1.zone.service.drover.",
                                                      "0 1 9002 z2.zone.service.drover."}));
  const auto a = Dig("zone.service.drover A +short");
  EXPECT_EQ(Lines(a.out), (std::vector<std::string>{"127.0.0.3", "127.0.0.4"}));
  const auto rfc = Dig("_zone._tcp.service.drover SRV +short");
  EXPECT_EQ(Lines(rfc.out), Lines(srv.out));
  const auto target = Dig("z2.zone.service.drover A +short");
  EXPECT_EQ(Lines(target.out), (std::vector<std::string>{"127.0.0.4"}));
  // The SRV answer carries its targets' addresses (HAProxy uses them without asking again).
  const auto additional = Dig("zone.service.drover SRV +noall +additional");
  EXPECT_NE(additional.out.find("z1.zone.service.drover.\t1\tIN\tA\t127.0.0.3"), std::string::npos)
      << additional.out;

  const auto unknown = Dig("nope.service.drover A");
  EXPECT_NE(unknown.out.find("status: NXDOMAIN"), std::string::npos) << unknown.out;
  const auto outside = Dig("example.com A");
  EXPECT_NE(outside.out.find("status: REFUSED"), std::string::npos) << outside.out;
  const auto transfer = Dig("drover AXFR");
  EXPECT_EQ(transfer.out.find("IN\tSOA"), std::string::npos) << transfer.out;
}

TEST_F(DnsTest, OverAHundredInstancesUdpIsTruncatedAndTcpIsComplete) {
  for (int i = 1; i <= 101; ++i) {
    Register("big", "b" + std::to_string(i),
             "10.9." + std::to_string(i / 200) + "." + std::to_string(i % 200 + 1) + ":7000");
  }
  const auto udp = Dig("big.service.drover SRV +notcp +ignore");
  ASSERT_EQ(udp.exit_code, 0) << udp.out;
  EXPECT_TRUE(std::regex_search(udp.out, std::regex(R"(flags: qr aa tc rd;)"))) << udp.out;
  EXPECT_NE(udp.out.find("ANSWER: 0"), std::string::npos) << udp.out;
  const auto tcp = Dig("big.service.drover SRV +tcp +short");
  ASSERT_EQ(tcp.exit_code, 0) << tcp.out;
  EXPECT_EQ(Lines(tcp.out).size(), 101u);
  // dig's own retry over TCP after the truncated UDP answer gets the same whole list.
  const auto retried = Dig("big.service.drover A +short");
  EXPECT_EQ(Lines(retried.out).size(), 101u);
}

// Sends `bytes` in one datagram; the reply, or "" when none comes within 1 s.
std::string UdpExchange(std::uint16_t port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  ::inet_pton(AF_INET, kRegistryIp, &to.sin_addr);
  ::sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  pollfd p{fd, POLLIN, 0};
  std::string reply;
  if (::poll(&p, 1, 1000) == 1) {
    char buf[2048];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) reply.assign(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply;
}

TEST_F(DnsTest, MalformedPacketsAreRefusedAndTheRegistryGoesOnServing) {
  Register("zone", "z1", "127.0.0.3:9001");
  // A header with five questions and no question bytes: FORMERR, same id.
  const std::string header("\x12\x34\x01\x00\x00\x05\x00\x00\x00\x00\x00\x00", 12);
  const std::string formerr = UdpExchange(dns_, header);
  ASSERT_EQ(formerr.size(), 12u);
  EXPECT_EQ(formerr.substr(0, 2), "\x12\x34");
  EXPECT_EQ(formerr[3] & 0x0f, 1);  // RCODE FORMERR
  // A label running past the end, and a compression loop: FORMERR too.
  std::string past = header;
  past[5] = 1;
  past += "\x3fzone";
  EXPECT_EQ(UdpExchange(dns_, past)[3] & 0x0f, 1);
  std::string loop = header;
  loop[5] = 1;
  loop += std::string("\xc0\x0c\x00\x01\x00\x01", 6);
  EXPECT_EQ(UdpExchange(dns_, loop)[3] & 0x0f, 1);
  // Scraps and answers get nothing.
  EXPECT_EQ(UdpExchange(dns_, "abc"), "");
  std::string response = header;
  response[2] = '\x81';
  EXPECT_EQ(UdpExchange(dns_, response), "");
  // TCP: a client that announces 64 KiB and hangs up, then one that sends garbage.
  {
    const int fd = testing::ConnectTo(kRegistryIp, dns_);
    ASSERT_GE(fd, 0);
    testing::SendAll(fd, std::string("\xff\xff\x01\x02", 4));
    ::close(fd);
  }
  {
    const int fd = testing::ConnectTo(kRegistryIp, dns_);
    ASSERT_GE(fd, 0);
    testing::SendAll(fd, std::string("\x00\x0c", 2) + header);
    char buf[64];
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 2000), 1);
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_EQ(n, 14);
    EXPECT_EQ(buf[5] & 0x0f, 1);
    ::close(fd);
  }
  const auto still = Dig("zone.service.drover A +short");
  EXPECT_EQ(Lines(still.out), (std::vector<std::string>{"127.0.0.3"}));
  const auto still_tcp = Dig("zone.service.drover A +short +tcp");
  EXPECT_EQ(Lines(still_tcp.out), (std::vector<std::string>{"127.0.0.3"}));
  // The registry's /metrics counts them.
  const auto metrics = testing::HttpTo(kRegistryIp, http_, "GET", "/metrics");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(metrics.body, m,
                                std::regex(R"(drover_registry_dns_malformed_total (\d+))")))
      << metrics.body;
  EXPECT_GE(std::stoi(m[1]), 5);  // three FORMERR over UDP, one over TCP, the scrap
  EXPECT_TRUE(std::regex_search(
      metrics.body, std::regex(R"(drover_registry_dns_queries_total\{transport="tcp"\} [1-9])")))
      << metrics.body;
}

TEST_F(DnsTest, BadDnsFlagsAreUsageErrors) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--dns", "localhost:0"},
        std::vector<std::string>{"--dns", "127.0.0.1:0", "--dns-domain", "bad..domain"}}) {
    std::string command = std::string(DROVER_BINARY) + " registry --data-dir " + dir_.path() +
                          "/bad --http 127.0.0.1:0 --grpc off";
    for (const std::string& f : flags) command += " " + f;
    const auto run = testing::RunCommand(command);
    EXPECT_EQ(run.exit_code, 2) << command << "\n" << run.out;
    EXPECT_NE(run.out.find("--dns"), std::string::npos) << run.out;
  }
}

// A zone server process listening on its own loopback address.
struct Zone {
  std::unique_ptr<ChildProcess> process;
  std::string id;
  std::uint16_t port = 0;
};

TEST_F(DnsTest, HaproxyFollowsTheSrvRecordsWithoutFailingASession) {
  ASSERT_TRUE(std::filesystem::exists("/usr/sbin/haproxy"))
      << "haproxy is missing: scripts/setup.sh installs it";
  auto start_zone = [&](const std::string& id, const std::string& ip) {
    Zone z;
    z.id = id;
    // Leaving: DRAINING and deregistered, then 3 s before the listener closes -- HAProxy asks
    // every 200 ms, so it has let go of the server long before.
    z.process = std::make_unique<ChildProcess>(std::vector<std::string>{
        ZONE_SERVER_BINARY, "--registry", std::string(kRegistryIp) + ":" + std::to_string(grpc_),
        "--id", id, "--listen", ip + ":0", "--health", ip + ":0", "--warmup-ms", "0",
        "--propagation-ms", "3000", "--drain-ms", "1000", "--grace-ms", "6000"});
    for (int line = 0; line < 4 && z.port == 0; ++line) {
      const auto text = z.process->ReadLine(20s);
      if (!text) break;
      z.port = PortIn(*text, R"(serving at [0-9.]+:(\d+))");
    }
    return z;
  };
  std::vector<Zone> zones;
  zones.push_back(start_zone("z1", "127.0.0.3"));
  zones.push_back(start_zone("z2", "127.0.0.4"));
  zones.push_back(start_zone("z3", "127.0.0.5"));
  for (const Zone& z : zones) ASSERT_NE(z.port, 0) << z.id << " did not start";
  ASSERT_TRUE(testing::Eventually(
      [&] { return Lines(Dig("_zone._tcp.service.drover SRV +short").out).size() == 3; }, 10s,
      50ms));

  const std::uint16_t front = testing::FreeLoopbackPort();
  const std::string config = dir_.path() + "/haproxy.cfg";
  std::ofstream(config) << "global\n"
                           "  maxconn 512\n"
                           "defaults\n"
                           "  mode tcp\n"
                           "  timeout connect 1s\n"
                           "  timeout client 10s\n"
                           "  timeout server 10s\n"
                           "resolvers drover\n"
                           "  nameserver registry "
                        << kRegistryIp << ":" << dns_
                        << "\n"
                           "  accepted_payload_size 1232\n"
                           "  timeout resolve 200ms\n"
                           "  timeout retry 200ms\n"
                           "  hold valid 1s\n"
                           "  hold obsolete 0s\n"
                           "listen zone\n"
                           "  bind 127.0.0.1:"
                        << front
                        << "\n"
                           "  balance roundrobin\n"
                           "  server-template z 6 _zone._tcp.service.drover resolvers drover "
                           "init-addr none\n";
  const auto check = testing::RunCommand("/usr/sbin/haproxy -c -f " + config);
  ASSERT_EQ(check.exit_code, 0) << check.out;
  ChildProcess haproxy({"/usr/sbin/haproxy", "-db", "-f", config});

  // Players through HAProxy, one session after another: HELLO -> WELCOME <zone id>.
  std::mutex mu;
  std::map<std::string, int> sessions;  // per zone id
  std::map<std::string, std::chrono::steady_clock::time_point> last_seen;
  std::vector<std::string> failures;
  std::atomic<bool> stop{false};
  auto play = [&]() -> std::optional<std::string> {
    testing::LineClient player(front);
    if (!player.connected()) return std::nullopt;
    const auto welcome = player.Ask("HELLO p");
    if (!welcome || welcome->rfind("WELCOME ", 0) != 0) return std::nullopt;
    player.Ask("QUIT");
    return welcome->substr(8);
  };
  auto reached = [&](const std::string& id) {
    std::lock_guard lock(mu);
    return sessions[id] > 0;
  };
  // HAProxy has resolved the three before the loop counts failures.
  ASSERT_TRUE(testing::Eventually(
      [&] {
        auto who = play();
        if (who) {
          std::lock_guard lock(mu);
          ++sessions[*who];
        }
        return reached("z1") && reached("z2") && reached("z3");
      },
      15s, 20ms))
      << "HAProxy never reached all three zones";
  std::thread loop([&] {
    while (!stop.load()) {
      auto who = play();
      std::lock_guard lock(mu);
      if (!who) {
        failures.push_back("session failed");
      } else {
        ++sessions[*who];
        last_seen[*who] = std::chrono::steady_clock::now();
      }
    }
  });

  // One added: it gets sessions once its SRV record is out.
  const auto added_at = std::chrono::steady_clock::now();
  zones.push_back(start_zone("z4", "127.0.0.6"));
  ASSERT_NE(zones.back().port, 0);
  EXPECT_TRUE(testing::Eventually([&] { return reached("z4"); }, 10s, 20ms));
  std::printf("first session on the added zone %.2f s after it started\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - added_at).count());

  // One drained: SIGTERM makes it DRAINING and deregistered while it still serves; HAProxy must
  // stop sending it players before its listener closes 3 s later.
  const auto drained_at = std::chrono::steady_clock::now();
  zones[1].process->Signal(SIGTERM);
  EXPECT_TRUE(testing::Eventually(
      [&] { return Lines(Dig("_zone._tcp.service.drover SRV +short").out).size() == 3; }, 5s,
      20ms));
  const int status = zones[1].process->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::this_thread::sleep_for(500ms);  // sessions go on after the drained zone is gone
  stop = true;
  loop.join();

  std::lock_guard lock(mu);
  int total = 0;
  for (const auto& [id, count] : sessions) total += count;
  std::printf("%d sessions through HAProxy, %zu failed\n", total, failures.size());
  EXPECT_TRUE(failures.empty()) << failures.size() << " sessions failed";
  ASSERT_TRUE(last_seen.count("z2"));
  const double last_z2 = std::chrono::duration<double>(last_seen["z2"] - drained_at).count();
  std::printf(
      "last session on the drained zone %.2f s after SIGTERM (its listener closed at 3 s)\n",
      last_z2);
  EXPECT_LT(last_z2, 3.0);
  for (const char* id : {"z1", "z3", "z4"}) EXPECT_GT(sessions[id], 0) << id;
}

}  // namespace
}  // namespace drover
