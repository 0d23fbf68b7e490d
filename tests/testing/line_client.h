// A blocking line-protocol client over a real loopback socket (zone server, session tests).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

#include "testing/http_client.h"

namespace drover::testing {

class LineClient {
 public:
  explicit LineClient(std::uint16_t port) : fd_(ConnectLoopback(port)) {}
  LineClient(const std::string& ip, std::uint16_t port) : fd_(ConnectTo(ip, port)) {}
  ~LineClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  LineClient(const LineClient&) = delete;
  LineClient& operator=(const LineClient&) = delete;

  bool connected() const { return fd_ >= 0; }

  bool Send(const std::string& line) {
    const std::string data = line + "\n";
    return fd_ >= 0 &&
           ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }

  // The next line without its newline; nullopt when the server closed or 10 s passed.
  std::optional<std::string> ReadLine() {
    while (fd_ >= 0) {
      const std::size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return line;
      }
      char buf[512];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return std::nullopt;
      buffer_.append(buf, static_cast<std::size_t>(n));
    }
    return std::nullopt;
  }

  std::optional<std::string> Ask(const std::string& line) {
    if (!Send(line)) return std::nullopt;
    return ReadLine();
  }

 private:
  int fd_;
  std::string buffer_;
};

}  // namespace drover::testing
