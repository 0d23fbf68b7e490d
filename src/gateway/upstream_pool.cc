#include "gateway/upstream_pool.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "gateway/thread_random.h"

namespace drover::gateway {
namespace {

// The peer closed the connection, or sent bytes nobody asked for: unusable either way.
bool Stale(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

}  // namespace

UpstreamPool::~UpstreamPool() {
  for (auto& [key, list] : idle_) {
    for (const Idle& c : list) ::close(c.fd);
  }
}

MonoTime UpstreamPool::RetireAt(MonoTime now) {
  if (options_.max_age <= Duration::zero()) return MonoTime::max();
  const double unit = ThreadRandom().UniformDouble();  // [0, 1)
  const double factor = 0.9 + 0.2 * unit;
  return now + std::chrono::duration_cast<MonoClock::duration>(options_.max_age * factor);
}

std::optional<int> UpstreamPool::Take(const std::string& key, MonoTime now, MonoTime* retire_at) {
  std::lock_guard lock(mu_);
  auto it = idle_.find(key);
  if (it == idle_.end()) return std::nullopt;
  std::deque<Idle>& list = it->second;
  std::optional<int> found;
  while (!list.empty() && !found) {
    const Idle c = list.back();
    list.pop_back();
    --stats_.idle;
    if (now >= c.retire_at) {
      ++stats_.retired_age;
    } else if (now - c.idle_since >= options_.idle_timeout) {
      ++stats_.retired_idle;
    } else if (Stale(c.fd)) {
      ++stats_.retired_closed;
    } else {
      found = c.fd;
      *retire_at = c.retire_at;
      ++stats_.reused;
      continue;
    }
    ::close(c.fd);
  }
  if (list.empty()) idle_.erase(it);
  return found;
}

void UpstreamPool::Put(const std::string& key, int fd, MonoTime retire_at, MonoTime now) {
  std::lock_guard lock(mu_);
  if (now >= retire_at) {
    ++stats_.retired_age;
    ::close(fd);
    return;
  }
  std::deque<Idle>& list = idle_[key];
  if (list.size() >= options_.max_idle_per_key) {
    ++stats_.overflow;
    ::close(fd);
    if (list.empty()) idle_.erase(key);
    return;
  }
  list.push_back({fd, retire_at, now});
  ++stats_.idle;
}

std::size_t UpstreamPool::Sweep(MonoTime now) {
  std::lock_guard lock(mu_);
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
      ++(aged ? stats_.retired_age : stats_.retired_idle);
      ::close(c->fd);
      c = list.erase(c);
      --stats_.idle;
      ++closed;
    }
    it = list.empty() ? idle_.erase(it) : std::next(it);
  }
  return closed;
}

UpstreamPool::Stats UpstreamPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace drover::gateway
