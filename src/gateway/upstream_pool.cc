#include "gateway/upstream_pool.h"

#include <sys/socket.h>

#include <cerrno>

#include "gateway/thread_random.h"

namespace drover::gateway {

using tcp = boost::asio::ip::tcp;

namespace {

// The peer closed the connection, or sent bytes nobody asked for: unusable either way.
bool Stale(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

}  // namespace

MonoTime UpstreamPool::RetireAt(MonoTime now) {
  if (options_.max_age <= Duration::zero()) return MonoTime::max();
  const double unit = ThreadRandom().UniformDouble();  // [0, 1)
  const double factor = 0.9 + 0.2 * unit;
  return now + std::chrono::duration_cast<MonoClock::duration>(options_.max_age * factor);
}

std::optional<tcp::socket> UpstreamPool::Take(const std::string& key, MonoTime now,
                                              MonoTime* retire_at, bool check_closed) {
  auto it = idle_.find(key);
  if (it == idle_.end()) return std::nullopt;
  std::deque<Idle>& list = it->second;
  std::optional<tcp::socket> found;
  while (!list.empty() && !found) {
    Idle c = std::move(list.back());
    list.pop_back();
    Bump(stats_.idle, -1);
    if (now >= c.retire_at) {
      Bump(stats_.retired_age);
    } else if (now - c.idle_since >= options_.idle_timeout) {
      Bump(stats_.retired_idle);
    } else if ((check_closed || c.check) && Stale(c.socket.native_handle())) {
      Bump(stats_.retired_closed);
    } else {
      *retire_at = c.retire_at;
      Bump(stats_.reused);
      found.emplace(std::move(c.socket));
    }
  }
  if (list.empty()) idle_.erase(it);
  return found;  // the others close as they go out of scope
}

void UpstreamPool::Put(const std::string& key, tcp::socket socket, MonoTime retire_at, MonoTime now,
                       bool check_before_reuse) {
  if (now >= retire_at) {
    Bump(stats_.retired_age);
    return;
  }
  auto [it, inserted] = idle_.try_emplace(key);
  std::deque<Idle>& list = it->second;
  if (list.size() >= options_.max_idle_per_key) {
    Bump(stats_.overflow);
    if (list.empty()) idle_.erase(it);
    return;
  }
  list.push_back({std::move(socket), retire_at, now, check_before_reuse});
  Bump(stats_.idle);
}

std::size_t UpstreamPool::Sweep(MonoTime now) {
  std::size_t closed = 0;
  for (auto it = idle_.begin(); it != idle_.end();) {
    std::deque<Idle>& list = it->second;
    for (auto c = list.begin(); c != list.end();) {
      const bool aged = now >= c->retire_at;
      const bool idled = now - c->idle_since >= options_.idle_timeout;
      if (!aged && !idled) {
        ++c;
        continue;
      }
      Bump(aged ? stats_.retired_age : stats_.retired_idle);
      c = list.erase(c);  // closes it
      Bump(stats_.idle, -1);
      ++closed;
    }
    it = list.empty() ? idle_.erase(it) : std::next(it);
  }
  return closed;
}

UpstreamPool::Stats UpstreamPool::stats() const {
  const auto get = [](const std::atomic<std::uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  return {get(stats_.idle),         get(stats_.reused),         get(stats_.retired_age),
          get(stats_.retired_idle), get(stats_.retired_closed), get(stats_.overflow)};
}

}  // namespace drover::gateway
