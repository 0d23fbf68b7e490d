// HttpBackend: a small HTTP/1.1 upstream on a loopback port for gateway tests, with knobs for the
// failures a proxy must handle and counters of what it saw. A thread per connection, Beast for
// parsing. Every response carries `X-Instance: <id>` and `X-Conn: <n>` (the connection's serial
// number at this backend, from 1), so a test sees which instance and which connection served it.
//   /echo          the request body back
//   /headers       the request head as received, as the body
//   /big?n=BYTES   n bytes of a repeating pattern ("0123456789"), sent chunked
//   anything else  "<id> <method> <target>"
#pragma once

// clang-format off
#include <utility>  // Boost 1.74's Asio needs it first
// clang-format on

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sdk/socket_util.h"

namespace drover::testing {

class HttpBackend {
 public:
  explicit HttpBackend(std::string backend_id) : id(std::move(backend_id)) {
    auto listening = sdk::ListenTcp("127.0.0.1:0", 128, "test backend");
    listen_fd_ = listening.ok() ? listening->fd : -1;
    address_ = listen_fd_ >= 0 ? sdk::LocalAddress(listen_fd_) : "";
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~HttpBackend() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (const int fd : open_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : workers_) t.join();
    ::close(listen_fd_);
  }
  HttpBackend(const HttpBackend&) = delete;
  HttpBackend& operator=(const HttpBackend&) = delete;

  const std::string& address() const { return address_; }
  std::string last_head() const {
    std::lock_guard lock(mu_);
    return last_head_;
  }

  const std::string id;
  // Knobs.
  std::atomic<int> reset_requests{0};  // this many requests get the connection closed unanswered
  std::atomic<int> status{200};
  std::atomic<int> delay_ms{0};             // before answering
  std::atomic<bool> frame_by_close{false};  // answer without Content-Length, then close
  // Answer as keep-alive (with Content-Length, no "Connection: close"), then close anyway, as a
  // server past its keep-alive timeout or request limit may.
  std::atomic<bool> close_after_answer{false};
  // Above 0: a HEAD is answered with its head, and this many ms later with the body it must not
  // have (a misbehaving server); the connection stays open.
  std::atomic<int> late_head_body_ms{0};
  // What it saw.
  std::atomic<int> connections{0};
  std::atomic<int> closed{0};  // connections that ended
  std::atomic<int> requests{0};

 private:
  void AcceptLoop() {
    while (!stopping_) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (stopping_) return;
        continue;
      }
      const int serial = ++connections;
      std::lock_guard lock(mu_);
      open_.push_back(fd);
      workers_.emplace_back([this, fd, serial] { Serve(fd, serial); });
    }
  }

  void Serve(int fd, int serial) {
    namespace http = boost::beast::http;
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    boost::system::error_code ec;
    socket.assign(boost::asio::ip::tcp::v4(), fd, ec);
    boost::beast::flat_buffer buffer;
    while (!ec) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      http::read(socket, buffer, parser, ec);
      if (ec) break;
      ++requests;
      auto& req = parser.get();
      {
        std::lock_guard lock(mu_);
        last_head_ = HeadText(req);
      }
      if (reset_requests.load() > 0) {
        --reset_requests;
        break;  // closed unanswered
      }
      if (delay_ms.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      const std::string target(req.target());
      std::string body;
      bool chunked = false;
      if (target == "/echo" || target.ends_with("/echo")) {
        body = req.body();
      } else if (target.ends_with("/headers")) {
        body = HeadText(req);
      } else if (const std::size_t q = target.find("/big?n="); q != std::string::npos) {
        const std::size_t n = std::stoul(target.substr(q + 7));
        body.reserve(n);
        for (std::size_t i = 0; i < n; ++i) body.push_back(static_cast<char>('0' + i % 10));
        chunked = true;
      } else {
        body = id + " " + std::string(req.method_string()) + " " + target;
      }
      if (req.method() == http::verb::head && late_head_body_ms.load() > 0) {
        const std::string head = "HTTP/1.1 200 OK\r\nX-Instance: " + id +
                                 "\r\nX-Conn: " + std::to_string(serial) +
                                 "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
        boost::asio::write(socket, boost::asio::buffer(head), ec);
        std::this_thread::sleep_for(std::chrono::milliseconds(late_head_body_ms));
        if (!ec) boost::asio::write(socket, boost::asio::buffer(body), ec);
        continue;
      }
      if (frame_by_close) {
        std::string raw = "HTTP/1.1 " + std::to_string(status.load()) + " X\r\nX-Instance: " + id +
                          "\r\nX-Conn: " + std::to_string(serial) + "\r\n\r\n" + body;
        boost::asio::write(socket, boost::asio::buffer(raw), ec);
        break;
      }
      http::response<http::string_body> res{static_cast<http::status>(status.load()), 11};
      res.set("X-Instance", id);
      res.set("X-Conn", std::to_string(serial));
      res.keep_alive(req.keep_alive());
      res.body() = std::move(body);
      if (chunked) {
        res.chunked(true);
      } else {
        res.prepare_payload();
      }
      http::write(socket, res, ec);
      if (!res.keep_alive() || close_after_answer) break;
    }
    socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    ++closed;
    std::lock_guard lock(mu_);
    std::erase(open_, socket.native_handle());
    socket.close(ec);
  }

  template <class Request>
  static std::string HeadText(const Request& req) {
    std::string text;
    for (const auto& f : req) {
      text += std::string(f.name_string()) + ": " + std::string(f.value()) + "\n";
    }
    return text;
  }

  int listen_fd_ = -1;
  std::string address_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::vector<int> open_;             // guarded by mu_
  std::vector<std::thread> workers_;  // guarded by mu_ while accepting
  std::string last_head_;             // guarded by mu_
  std::thread acceptor_;
};

}  // namespace drover::testing
