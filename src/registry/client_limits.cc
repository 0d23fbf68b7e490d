#include "registry/client_limits.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/host_port.h"

namespace drover::registry {
namespace {

constexpr std::size_t kMaxBuckets = 10'000;  // write-limit buckets kept before idle ones go

std::string FormatRate(double rate) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", rate);
  return buf;
}

}  // namespace

Status ClientLimits::TakeWriteToken(const std::string& client) {
  if (options_.write_rate <= 0) return Status::Ok();
  const double rate = options_.write_rate;
  const double burst = options_.write_burst > 0 ? options_.write_burst : 2 * rate;
  const MonoTime now = MonoClock::now();
  MutexLock lock(mu_);
  if (buckets_.size() > kMaxBuckets) {
    // Forget clients idle long enough to have a full bucket again.
    std::erase_if(buckets_, [&](const auto& b) {
      return std::chrono::duration<double>(now - b.second.last).count() * rate >= burst;
    });
  }
  auto [it, fresh] = buckets_.try_emplace(client, Bucket{burst, now});
  Bucket& b = it->second;
  if (!fresh) {
    b.tokens =
        std::min(burst, b.tokens + std::chrono::duration<double>(now - b.last).count() * rate);
    b.last = now;
  }
  if (b.tokens < 1) {
    ++rate_limited_writes_;
    return ResourceExhaustedError("write rate limit: " + FormatRate(rate) +
                                  " writes/s per client address; retry shortly");
  }
  b.tokens -= 1;
  return Status::Ok();
}

Status ClientLimits::AcquireWatch(const std::string& client) {
  MutexLock lock(mu_);
  std::size_t& open = open_watches_[client];
  if (open < options_.max_watches_per_client) {
    ++open;
    return Status::Ok();
  }
  if (open == 0) open_watches_.erase(client);
  ++refused_watches_;
  return ResourceExhaustedError("too many watch streams from " + client + " (limit " +
                                std::to_string(options_.max_watches_per_client) + ")");
}

void ClientLimits::ReleaseWatch(const std::string& client) {
  MutexLock lock(mu_);
  if (auto it = open_watches_.find(client); it != open_watches_.end()) {
    if (--it->second == 0) open_watches_.erase(it);
  }
}

std::uint64_t ClientLimits::rate_limited_writes() const {
  MutexLock lock(mu_);
  return rate_limited_writes_;
}

std::uint64_t ClientLimits::refused_watches() const {
  MutexLock lock(mu_);
  return refused_watches_;
}

std::string ClientAddressOfPeer(std::string_view peer) {
  for (const std::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (!peer.starts_with(scheme)) continue;
    auto address = ParseHostPort(peer.substr(scheme.size()), "peer");
    if (address.ok()) return address->host;
  }
  return std::string(peer);
}

}  // namespace drover::registry
