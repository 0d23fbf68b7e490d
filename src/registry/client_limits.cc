#include "registry/client_limits.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/host_port.h"
#include "common/text.h"

namespace drover::registry {
namespace {

constexpr std::size_t kMaxBuckets = 10'000;  // write-limit buckets kept before idle ones go

std::string FormatRate(double rate) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", rate);
  return buf;
}

}  // namespace

bool ClientLimits::Take(Bucket& b, bool fresh, double rate, double burst, MonoTime now) {
  if (fresh) {
    b = Bucket{burst, now};
  } else {
    b.tokens =
        std::min(burst, b.tokens + std::chrono::duration<double>(now - b.last).count() * rate);
    b.last = now;
  }
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

Status ClientLimits::TakeWriteToken(const std::string& client) {
  if (options_.write_rate <= 0 && options_.total_write_rate <= 0) return Status::Ok();
  const MonoTime now = MonoClock::now();
  MutexLock lock(mu_);
  if (options_.total_write_rate > 0) {
    const double rate = options_.total_write_rate;
    if (!Take(total_writes_, total_writes_fresh_, rate, std::max(1.0, rate / 10), now)) {
      total_writes_fresh_ = false;
      ++rate_limited_writes_;
      return ResourceExhaustedError("the registry takes at most " + FormatRate(rate) +
                                    " writes/s in all (total_write_rate); retry shortly");
    }
    total_writes_fresh_ = false;
  }
  if (options_.write_rate <= 0) return Status::Ok();
  const double rate = options_.write_rate;
  const double burst = options_.write_burst > 0 ? options_.write_burst : 2 * rate;
  if (buckets_.size() > kMaxBuckets) {
    // Forget clients idle long enough to have a full bucket again.
    std::erase_if(buckets_, [&](const auto& b) {
      return std::chrono::duration<double>(now - b.second.last).count() * rate >= burst;
    });
  }
  auto [it, fresh] = buckets_.try_emplace(client);
  if (!Take(it->second, fresh, rate, burst, now)) {
    ++rate_limited_writes_;
    return ResourceExhaustedError("write rate limit: " + FormatRate(rate) + " writes/s per " +
                                  client.substr(0, client.find(' ')) + "; retry shortly");
  }
  return Status::Ok();
}

Status ClientLimits::AcquireWatch(const std::string& client) {
  MutexLock lock(mu_);
  if (total_watches_ >= options_.max_watches) {
    ++refused_watches_;
    return ResourceExhaustedError("the registry serves its maximum of " +
                                  std::to_string(options_.max_watches) +
                                  " watch streams (max_watches); retry shortly or use another");
  }
  std::size_t& open = open_watches_[client];
  if (open < options_.max_watches_per_client) {
    ++open;
    ++total_watches_;
    return Status::Ok();
  }
  ++refused_watches_;
  return ResourceExhaustedError("too many watch streams for " + client + " (limit " +
                                std::to_string(options_.max_watches_per_client) +
                                ", max_watches_per_client)");
}

void ClientLimits::ReleaseWatch(const std::string& client) {
  MutexLock lock(mu_);
  if (auto it = open_watches_.find(client); it != open_watches_.end()) {
    if (--it->second == 0) open_watches_.erase(it);
    --total_watches_;
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

std::string ConnectionOfPeer(std::string_view peer) {
  for (const std::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (!peer.starts_with(scheme)) continue;
    // gRPC writes an IPv6 peer's brackets percent-encoded: "ipv6:%5B::1%5D:5000".
    std::string text(peer.substr(scheme.size()));
    text = ReplaceAll(ReplaceAll(std::move(text), "%5B", "["), "%5D", "]");
    auto address = ParseHostPort(text, "peer");
    if (address.ok()) return address->ToString();
  }
  return std::string(peer);
}

std::string ClientIdentity(const Result<std::string>& token_name, std::string_view peer) {
  if (token_name.ok() && !token_name->empty()) return "token " + *token_name;
  return "connection " + std::string(peer);
}

void WatchSlot::Release() {
  if (limits_) std::exchange(limits_, nullptr)->ReleaseWatch(client_);
}

}  // namespace drover::registry
