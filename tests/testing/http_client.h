// A minimal blocking HTTP/1.1 client over a real loopback socket, for tests: one request per
// connection ("Connection: close"), plus a reader for chunked streaming responses.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace drover::testing {

struct HttpReply {
  int status = 0;  // 0: no reply (connection failed)
  std::string headers;
  std::string body;
};

// Connects to `ip` (IPv4, e.g. "127.0.0.3": a "host" of a fleet test), or -1.
inline int ConnectTo(const std::string& ip, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // Bounded: a server that stops answering fails the test instead of hanging it.
  const timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    ::close(fd);
    return -1;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline int ConnectLoopback(std::uint16_t port) { return ConnectTo("127.0.0.1", port); }

inline bool SendAll(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

inline std::string RequestText(const std::string& method, const std::string& target,
                               const std::string& body, const std::string& extra_headers = {}) {
  return method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Sends `raw` as is to `ip`:`port` and reads the whole reply (the server closes after it).
inline HttpReply SendRawTo(const std::string& ip, std::uint16_t port, const std::string& raw) {
  HttpReply reply;
  const int fd = ConnectTo(ip, port);
  if (fd < 0 || !SendAll(fd, raw)) {
    if (fd >= 0) ::close(fd);
    return reply;
  }
  std::string data;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) data.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const std::size_t end = data.find("\r\n\r\n");
  if (data.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return reply;
  reply.status = std::stoi(data.substr(9, 3));
  reply.headers = data.substr(0, end);
  reply.body = data.substr(end + 4);
  return reply;
}

inline HttpReply SendRaw(std::uint16_t port, const std::string& raw) {
  return SendRawTo("127.0.0.1", port, raw);
}

inline HttpReply Http(std::uint16_t port, const std::string& method, const std::string& target,
                      const std::string& body = {}) {
  return SendRaw(port, RequestText(method, target, body));
}

inline HttpReply HttpTo(const std::string& ip, std::uint16_t port, const std::string& method,
                        const std::string& target, const std::string& body = {}) {
  return SendRawTo(ip, port, RequestText(method, target, body));
}

// Decodes the complete chunks of a chunked body in `raw` from `pos`, appending their data to
// `out`; returns where the undecoded rest starts. A zero-size chunk (the end of the body) sets
// `*ended` when given; malformed framing stops the decoding there.
inline std::size_t DecodeChunks(const std::string& raw, std::size_t pos, std::string& out,
                                bool* ended = nullptr) {
  while (true) {
    const std::size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    std::size_t size = 0;
    try {
      size = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    } catch (const std::exception&) {
      break;  // not chunked framing
    }
    if (size == 0) {
      if (ended != nullptr) *ended = true;
      break;
    }
    if (raw.size() < eol + 2 + size + 2) break;
    out.append(raw, eol + 2, size);
    pos = eol + 2 + size + 2;
  }
  return pos;
}

// An open chunked response whose data is read line by line.
class StreamReader {
 public:
  // `extra_headers`: whole lines, each ending in \r\n ("Authorization: Bearer t\r\n").
  StreamReader(std::uint16_t port, const std::string& target,
               const std::string& extra_headers = {}) {
    fd_ = ConnectLoopback(port);
    if (fd_ >= 0) SendAll(fd_, RequestText("GET", target, "", extra_headers));
  }
  ~StreamReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  // Waits (real time, bounded) until `count` complete lines of chunk payload have arrived.
  std::vector<std::string> Lines(std::size_t count, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Decode().size() < count && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0))) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      raw_.append(buf, static_cast<std::size_t>(n));
    }
    return Decode();
  }

  // Waits until the server closes the connection; false if it stays open past `timeout`.
  bool Ended(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return true;
      raw_.append(buf, static_cast<std::size_t>(n));
    }
    return false;
  }

  int status() const { return raw_.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(raw_.substr(9, 3)) : 0; }

 private:
  // Payload lines of the complete chunks received so far.
  std::vector<std::string> Decode() const {
    std::vector<std::string> lines;
    std::size_t pos = raw_.find("\r\n\r\n");
    if (pos == std::string::npos) return lines;
    pos += 4;
    std::string payload;
    DecodeChunks(raw_, pos, payload);
    std::size_t start = 0, nl;
    while ((nl = payload.find('\n', start)) != std::string::npos) {
      lines.push_back(payload.substr(start, nl - start));
      start = nl + 1;
    }
    return lines;
  }

  int fd_ = -1;
  std::string raw_;
};

}  // namespace drover::testing
