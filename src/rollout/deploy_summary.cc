#include "rollout/deploy_summary.h"

#include <cstdio>

namespace drover::rollout {

using json = nlohmann::json;

namespace {

std::string Format(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// The hosts a batch touches, in order, each once.
std::string BatchHosts(const json& batch) {
  std::string hosts;
  for (const auto& item : batch.value("items", json::array())) {
    const std::string host = item.value("host", item.value("old_host", ""));
    if (!host.empty() && hosts.find(host) == std::string::npos) {
      hosts += (hosts.empty() ? "" : ", ") + host;
    }
  }
  return hosts;
}

}  // namespace

std::string DeploySummary(const json& deploy) {
  const json& r = deploy.value("record", json::object());
  std::string out = "deploy " + deploy.value("id", "") + ": " + r.value("service", "") + " " +
                    r.value("version", "") + ", " +
                    (deploy.value("active", false) ? "running, " : "") +
                    r.value("state", r.value("verdict", "")) + "\n";
  if (!r.value("reason", "").empty()) out += "  " + r.value("reason", "") + "\n";
  if (r.contains("control")) out += "  asked to " + r["control"].value("request", "") + "\n";
  for (const auto& b : r.value("batches", json::array())) {
    out += Format("  %sbatch %d: %-7s %zu instance(s) on %s",
                  b.value("canary", false) ? "canary " : "", b.value("index", 0),
                  b.value("verdict", "").c_str(), b.value("items", json::array()).size(),
                  BatchHosts(b).c_str());
    if (b.contains("gated_after_s") && b["gated_after_s"].is_number()) {
      out += Format(", gated after %.1f s", b["gated_after_s"].get<double>());
    }
    out += "\n";
  }
  if (r.contains("left_running")) out += "  left running: " + r["left_running"].dump() + "\n";
  return out;
}

}  // namespace drover::rollout
