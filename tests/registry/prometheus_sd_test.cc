// Prometheus' HTTP service discovery end to end: a real `drover registry`, zone_server processes
// (ServerHost: /metrics on the probe port, registered as drover.metrics) and Debian's real
// `prometheus` reading GET /v1/prometheus/sd with http_sd_configs. Prometheus must discover
// exactly the READY instances, scrape them (up == 1), and drop one that leaves.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/port_in.h"
#include "testing/registry_process.h"
#include "testing/temp_dir.h"

namespace drover {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::Eventually;

constexpr const char* kPrometheus = "/usr/bin/prometheus";
// Prometheus 2.42 passes discovered targets on through two fixed 5 s throttles that no setting
// shortens: the discovery manager's update tick and the scrape manager's reload tick
// (--scrape.discovery-reload-interval is clamped to at least 5 s). A change in the registry
// reaches /api/v1/targets within a refresh plus both ticks, so with a refresh interval over those
// 10 s (12 s: 2 s for the processes' own delays) "within two refreshes" holds by construction,
// and the test asserts exactly that.
constexpr auto kRefresh = 12s;

// A GET to 127.0.0.1:`port`, the body decoded when chunked (Go's server chunks large replies).
testing::HttpReply Get(std::uint16_t port, const std::string& target) {
  testing::HttpReply reply = testing::Http(port, "GET", target);
  if (reply.headers.find("Transfer-Encoding: chunked") != std::string::npos) {
    std::string body;
    testing::DecodeChunks(reply.body, 0, body);
    reply.body = std::move(body);
  }
  return reply;
}

nlohmann::json JsonOf(const testing::HttpReply& reply) {
  return nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

class PrometheusSdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kPrometheus))
        << kPrometheus << " is missing: install Debian's `prometheus` package (scripts/setup.sh "
        << "installs it)";
    ASSERT_FALSE(dir_.path().empty());
    registry_ = testing::StartRegistryProcess(
        DROVER_BINARY, {"--data-dir", dir_.path() + "/registry", "--http", "127.0.0.1:0", "--grpc",
                        "127.0.0.1:0"});
    ASSERT_NE(registry_.http, 0) << registry_.line;
    ASSERT_NE(registry_.grpc, 0) << registry_.line;
  }

  void TearDown() override {
    if (HasFailure()) PrintPrometheusLog();
  }

  struct Zone {
    std::unique_ptr<ChildProcess> process;
    std::string address;      // where clients connect (the registered address)
    std::uint16_t probe = 0;  // /live, /ready, /metrics
  };

  // A zone_server registered READY, once it says so.
  Zone StartZone(const std::string& id) {
    Zone z;
    z.process = std::make_unique<ChildProcess>(std::vector<std::string>{
        ZONE_SERVER_BINARY, "--registry", registry_.grpc_address(), "--id", id, "--health",
        "127.0.0.1:0", "--warmup-ms", "0", "--propagation-ms", "0", "--drain-ms", "200",
        "--log-level", "warn"});
    const auto first = z.process->ReadLine(20s);
    const auto second = z.process->ReadLine(20s);
    EXPECT_TRUE(first && second) << id << " did not start";
    if (!first || !second) return z;
    z.probe = testing::PortIn(*first, R"(probes on http://127\.0\.0\.1:(\d+)/ready)");
    const std::size_t at = second->find("serving at ");
    EXPECT_NE(at, std::string::npos) << *second;
    if (at != std::string::npos) {
      z.address = second->substr(at + 11, second->find(' ', at + 11) - at - 11);
    }
    return z;
  }

  // Starts prometheus on a free port with its files in the test's directory, and waits until it
  // is ready.
  void StartPrometheus() {
    prometheus_port_ = testing::FreeLoopbackPort();
    ASSERT_NE(prometheus_port_, 0);
    const std::string home = dir_.path() + "/prometheus";
    std::filesystem::create_directories(home);
    const std::string config = home + "/prometheus.yml";
    std::ofstream(config) << "global:\n"
                          << "  scrape_interval: 1s\n"
                          << "  scrape_timeout: 1s\n"
                          << "scrape_configs:\n"
                          << "  - job_name: drover\n"
                          << "    http_sd_configs:\n"
                          << "      - url: http://127.0.0.1:" << registry_.http
                          << "/v1/prometheus/sd\n"
                          << "        refresh_interval: " << kRefresh.count() << "s\n"
                          << "    relabel_configs:\n"
                          << "      - source_labels: [__meta_drover_instance]\n"
                          << "        target_label: drover_instance\n"
                          << "      - source_labels: [__meta_drover_service]\n"
                          << "        target_label: service\n";
    prometheus_log_ = home + "/prometheus.log";
    // Through sh only to send its log to a file; `exec` keeps the pid, so the child's kill and
    // reap (and its death signal) reach prometheus itself.
    prometheus_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        "/bin/sh", "-c",
        std::string("exec ") + kPrometheus + " --config.file=" + config + " --storage.tsdb.path=" +
            home + "/data" + " --web.listen-address=127.0.0.1:" + std::to_string(prometheus_port_) +
            " 2>" + prometheus_log_});
    ASSERT_TRUE(
        Eventually([&] { return Get(prometheus_port_, "/-/ready").status == 200; }, 60s, 50ms))
        << "prometheus did not become ready";
  }

  // Prometheus' active targets of the job: drover_instance -> the target's JSON.
  std::map<std::string, nlohmann::json> ActiveTargets() {
    std::map<std::string, nlohmann::json> out;
    const nlohmann::json body = JsonOf(Get(prometheus_port_, "/api/v1/targets?state=active"));
    if (!body.is_object() || body.value("status", "") != "success") return out;
    for (const auto& t : body.at("data").at("activeTargets")) {
      if (t.value("scrapePool", "") != "drover") continue;
      out[t.at("labels").value("drover_instance", "?")] = t;
    }
    return out;
  }

  // The value of every series of `query` by its drover_instance label.
  std::map<std::string, std::string> Query(const std::string& query) {
    std::map<std::string, std::string> out;
    const nlohmann::json body = JsonOf(Get(prometheus_port_, "/api/v1/query?query=" + query));
    if (!body.is_object() || body.value("status", "") != "success") return out;
    for (const auto& r : body.at("data").at("result")) {
      out[r.at("metric").value("drover_instance", "?")] = r.at("value").at(1).get<std::string>();
    }
    return out;
  }

  // Instance ids the registry offers Prometheus now.
  std::set<std::string> Offered() {
    std::set<std::string> ids;
    const nlohmann::json groups = JsonOf(Get(registry_.http, "/v1/prometheus/sd"));
    if (!groups.is_array()) return ids;
    for (const auto& g : groups) {
      ids.insert(g.at("labels").value("__meta_drover_instance", std::string("?")));
    }
    return ids;
  }

  void PrintPrometheusLog() const {
    if (prometheus_log_.empty()) return;
    std::ifstream in(prometheus_log_);
    std::stringstream text;
    text << in.rdbuf();
    std::cout << "--- prometheus log ---\n" << text.str() << "--- end ---\n";
  }

  testing::TempDir dir_;  // first: removed after every process is gone
  testing::RegistryProcess registry_;
  std::unique_ptr<ChildProcess> prometheus_;
  std::uint16_t prometheus_port_ = 0;
  std::string prometheus_log_;
};

TEST_F(PrometheusSdTest, PrometheusScrapesExactlyTheReadyInstancesAndDropsOneThatLeaves) {
  std::map<std::string, Zone> zones;
  for (const std::string id : {"z1", "z2", "z3"}) {
    zones[id] = StartZone(id);
    ASSERT_NE(zones[id].probe, 0) << id;
  }
  // Registered by hand with the metrics label of a real, scrapeable endpoint: only their state
  // keeps them out. One is still STARTING, one READY but not accepting.
  const std::string metrics = "127.0.0.1:" + std::to_string(zones["z1"].probe);
  for (const auto& [id, extra] : std::vector<std::pair<std::string, std::string>>{
           {"starting", R"("state":"STARTING")"},
           {"paused", R"("state":"READY","accepting":false)"}}) {
    const auto put = testing::Http(
        registry_.http, "PUT", "/v1/services/zone/instances/" + id,
        R"({"address":"127.0.0.1:1","generation":1,"ttl_ms":3600000,"labels":{"drover.metrics":")" +
            metrics + R"("},)" + extra + "}");
    ASSERT_EQ(put.status, 200) << put.body;
  }
  ASSERT_EQ(Offered(), (std::set<std::string>{"z1", "z2", "z3"}));

  const auto t_start = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(StartPrometheus());
  const std::set<std::string> ready{"z1", "z2", "z3"};
  std::map<std::string, nlohmann::json> targets;
  const bool discovered = Eventually(
      [&] {
        targets = ActiveTargets();
        std::set<std::string> up;
        for (const auto& [id, t] : targets) {
          if (t.value("health", "") == "up") up.insert(id);
        }
        return targets.size() == ready.size() && up == ready;
      },
      60s, 100ms);
  ASSERT_TRUE(discovered) << "prometheus' active targets: " << nlohmann::json(targets).dump();
  std::cout << "prometheus discovered and scraped the 3 READY instances "
            << Ms(std::chrono::steady_clock::now() - t_start) << " ms after it started\n";
  EXPECT_FALSE(targets.contains("starting"));
  EXPECT_FALSE(targets.contains("paused"));
  for (const auto& [id, t] : targets) {
    // The target is the probe port, where ServerHost serves /metrics.
    const std::string probe = "127.0.0.1:" + std::to_string(zones[id].probe);
    EXPECT_EQ(t.value("scrapeUrl", ""), "http://" + probe + "/metrics");
    const nlohmann::json meta = t.value("discoveredLabels", nlohmann::json::object());
    EXPECT_EQ(meta.value("__meta_drover_service", ""), "zone");
    EXPECT_EQ(meta.value("__meta_drover_instance", ""), id);
    EXPECT_EQ(meta.value("__meta_drover_state", ""), "READY");
    EXPECT_EQ(meta.value("__meta_drover_address", ""), zones[id].address);
    EXPECT_EQ(meta.value("__meta_drover_label_drover_health", ""), probe);
    EXPECT_EQ(meta.value("__meta_drover_label_drover_metrics", ""), probe);
    // The relabelling example works.
    EXPECT_EQ(t.value("labels", nlohmann::json::object()).value("service", ""), "zone");
  }
  // Scraped: up == 1, and the samples are the host's own.
  EXPECT_TRUE(Eventually(
      [&] {
        const auto up = Query("up");
        const auto state = Query("drover_host_state%7Bstate%3D%22ready%22%7D");
        return up == std::map<std::string, std::string>{{"z1", "1"}, {"z2", "1"}, {"z3", "1"}} &&
               state == up;
      },
      30s, 100ms))
      << "up: " << nlohmann::json(Query("up")).dump();

  // z2 leaves (SIGTERM: DRAINING, deregister, close). Timed from when the registry stops
  // offering it.
  zones["z2"].process->Signal(SIGTERM);
  ASSERT_TRUE(Eventually([&] { return !Offered().contains("z2"); }, 20s, 10ms));
  const auto t_left = std::chrono::steady_clock::now();
  const bool dropped = Eventually(
      [&] {
        targets = ActiveTargets();
        return targets.size() == 2 && targets.contains("z1") && targets.contains("z3");
      },
      60s, 50ms);
  const auto delay = std::chrono::steady_clock::now() - t_left;
  ASSERT_TRUE(dropped) << "prometheus' active targets: " << nlohmann::json(targets).dump();
  const auto bound = 2 * kRefresh;
  std::cout << "prometheus dropped z2 " << Ms(delay)
            << " ms after the registry stopped offering it (refresh " << Ms(kRefresh)
            << " ms; bound: two refreshes = " << Ms(bound) << " ms)\n";
  EXPECT_LE(delay, bound);
  EXPECT_EQ(zones["z2"].process->Wait(), 0);  // left cleanly
}

}  // namespace
}  // namespace drover
