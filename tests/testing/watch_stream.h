// A registry watch stream (GET /v1/watch..., chunked NDJSON) read by a thread of its own: every
// event is parsed once, as it arrives, and kept in order. For tests that watch through a storm of
// thousands of events, where re-decoding the whole stream per read (StreamReader) would not do.
// The destructor stops the thread and closes the connection. Thread-safe.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "testing/http_client.h"

namespace drover::testing {

class WatchStream {
 public:
  // Connects to 127.0.0.1:`port` and asks for `target` (e.g. "/v1/watch?from=0").
  WatchStream(std::uint16_t port, const std::string& target) : fd_(ConnectLoopback(port)) {
    if (fd_ < 0 || !SendAll(fd_, RequestText("GET", target, ""))) {
      std::lock_guard lock(mu_);
      ended_ = true;
      return;
    }
    reader_ = std::jthread([this](std::stop_token stop) { Read(stop); });
  }
  ~WatchStream() {
    if (reader_.joinable()) {
      reader_.request_stop();
      reader_.join();
    }
    if (fd_ >= 0) ::close(fd_);
  }
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  // Every event received so far, in order.
  std::vector<nlohmann::json> Events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return events_.size();
  }
  // The server ended the stream (or it never started); true also after a line that is not JSON.
  bool ended() const {
    std::lock_guard lock(mu_);
    return ended_;
  }
  // Lines that were not JSON objects; a correct stream has none.
  int malformed() const {
    std::lock_guard lock(mu_);
    return malformed_;
  }

 private:
  void Read(std::stop_token stop) {
    std::string raw;      // bytes not decoded yet
    std::string payload;  // chunk data not yet split into lines
    bool in_body = false;
    while (!stop.stop_requested()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[16384];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      raw.append(buf, static_cast<std::size_t>(n));
      if (!in_body) {
        const std::size_t end = raw.find("\r\n\r\n");
        if (end == std::string::npos) continue;
        raw.erase(0, end + 4);
        in_body = true;
      }
      bool last = false;  // the last chunk: the server ended the stream
      raw.erase(0, DecodeChunks(raw, 0, payload, &last));
      if (last) {
        std::lock_guard lock(mu_);
        ended_ = true;
        return;
      }
      std::size_t start = 0, nl;
      std::vector<nlohmann::json> parsed;
      int bad = 0;
      while ((nl = payload.find('\n', start)) != std::string::npos) {
        auto event =
            nlohmann::json::parse(payload.substr(start, nl - start), nullptr, /*exceptions=*/false);
        if (event.is_object()) {
          parsed.push_back(std::move(event));
        } else {
          ++bad;
        }
        start = nl + 1;
      }
      payload.erase(0, start);
      std::lock_guard lock(mu_);
      for (auto& e : parsed) events_.push_back(std::move(e));
      malformed_ += bad;
    }
    std::lock_guard lock(mu_);
    ended_ = true;
  }

  int fd_ = -1;
  mutable std::mutex mu_;
  std::vector<nlohmann::json> events_;  // guarded by mu_
  bool ended_ = false;                  // guarded by mu_
  int malformed_ = 0;                   // guarded by mu_
  std::jthread reader_;
};

}  // namespace drover::testing
