#include "sdk/heartbeats.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

#include "common/thread_name.h"

namespace drover::sdk {

Heartbeats::Heartbeats(Clock& clock) : clock_(clock) {
  thread_ = std::jthread([this](std::stop_token stop) {
    NameThisThread("drover-beats");
    Run(stop);
  });
}

Heartbeats::~Heartbeats() { Stop(); }

void Heartbeats::Wake() { sleep_.request_stop(); }

std::uint64_t Heartbeats::Add(std::string name, Duration interval, std::function<void()> beat,
                              std::function<bool()> enabled) {
  MutexLock lock(mu_);
  const std::uint64_t id = next_id_++;
  tasks_.emplace(id, Task{std::move(name), interval, std::move(beat), std::move(enabled),
                          clock_.Now() + interval});
  Wake();  // the new task may be due before the current sleep ends
  return id;
}

void Heartbeats::Hasten(std::uint64_t id, Duration within) {
  MutexLock lock(mu_);
  const auto it = tasks_.find(id);
  if (it == tasks_.end()) return;
  it->second.due = std::min(it->second.due, clock_.Now() + within);
  Wake();
}

void Heartbeats::Remove(std::uint64_t id) {
  MutexLock lock(mu_);
  idle_.Wait(mu_, [&]() DROVER_REQUIRES(mu_) { return running_ != id; });
  tasks_.erase(id);
  Wake();
}

void Heartbeats::Stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  {
    MutexLock lock(mu_);
    Wake();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Heartbeats::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::stop_token sleep_token;
    MonoTime wake_at = MonoTime::max();
    std::uint64_t due_id = 0;
    {
      MutexLock lock(mu_);
      sleep_ = std::stop_source();
      sleep_token = sleep_.get_token();
      for (const auto& [id, task] : tasks_) {
        if (task.due < wake_at) {
          wake_at = task.due;
          due_id = id;
        }
      }
    }
    // Stop() ends this sleep through the forwarded callback; Add()/Remove() through sleep_.
    std::stop_callback forward(stop, [this] {
      MutexLock lock(mu_);
      Wake();
    });
    if (due_id == 0 || clock_.Now() < wake_at) {
      // No task, or none due: sleep until the first is due, or a change wakes us.
      clock_.SleepUntil(due_id == 0 ? clock_.Now() + std::chrono::hours(24) : wake_at, sleep_token);
      continue;
    }
    std::function<void()> beat;
    std::function<bool()> enabled;
    std::string name;
    {
      MutexLock lock(mu_);
      auto it = tasks_.find(due_id);
      if (it == tasks_.end()) continue;
      it->second.due = clock_.Now() + it->second.interval;
      beat = it->second.beat;
      enabled = it->second.enabled;
      name = it->second.name;
      running_ = due_id;  // from here Remove(due_id) waits for this beat
    }
    try {
      if (!enabled || enabled()) {
        beat();
        beats_.fetch_add(1);
      }
    } catch (const std::exception& e) {
      failures_.fetch_add(1);
      spdlog::error("heartbeat {}: {} (the next one runs on schedule)", name, e.what());
    } catch (...) {
      failures_.fetch_add(1);
      spdlog::error("heartbeat {}: unknown exception (the next one runs on schedule)", name);
    }
    {
      MutexLock lock(mu_);
      running_ = 0;
    }
    idle_.NotifyAll();
  }
}

}  // namespace drover::sdk
