// A real redis-server for tests: a child process on a free loopback port, its files in a
// directory of the test's. Kill() and Start() again (same port, same directory) simulate a
// restart: with no persistence (the default) it comes back empty; `durable` turns on the
// append-only file with an fsync per write (appendfsync always), so everything the server
// acknowledged before a SIGKILL is there again after the restart.
#pragma once

#include <signal.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "testing/child_process.h"
#include "testing/free_port.h"
#include "testing/line_client.h"

namespace drover::testing {

class RedisServer {
 public:
  explicit RedisServer(std::string dir, bool durable = false,
                       std::string binary = "/usr/bin/redis-server")
      : dir_(std::move(dir)),
        binary_(std::move(binary)),
        durable_(durable),
        port_(FreeLoopbackPort()) {
    started_ = Start();
  }

  // Starts the server (again) and waits until it answers PING; false if it never did.
  bool Start() {
    child_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        binary_, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", durable_ ? "yes" : "no", "--appendfsync", "always", "--dir", dir_,
        "--daemonize", "no", "--loglevel", "warning"});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      LineClient c(port_);
      if (c.connected() && c.Ask("PING") == "+PONG") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // SIGKILL: no goodbye to clients, as a crash.
  void Kill() {
    if (child_ && child_->running()) {
      child_->Signal(SIGKILL);
      child_->Wait();
    }
  }

  bool started() const { return started_; }
  std::uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  std::string dir_;
  std::string binary_;
  bool durable_;
  std::uint16_t port_;
  std::unique_ptr<ChildProcess> child_;
  bool started_ = false;
};

}  // namespace drover::testing
