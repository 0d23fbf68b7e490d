// AcceptThread: the accept loop of the SDK's blocking servers (health probes, sessions), which
// stay free of Asio so that a server linking the SDK gets no event loop it did not ask for. One
// thread polls the listening socket and a wake-up descriptor and hands each accepted connection
// to `on_accept` on that thread (the callee owns the descriptor). Running out of descriptors
// pauses the loop 100 ms instead of spinning: the connections wait in the backlog.
//
// Thread-safety: Stop() from any thread but the loop's own; it wakes the loop at once and joins
// it. The listening socket stays open: its owner closes it (after Stop()).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "drover/status.h"

namespace drover::sdk {

class AcceptThread {
 public:
  static Result<std::unique_ptr<AcceptThread>> Start(int listen_fd, std::string name,
                                                     std::function<void(int fd)> on_accept);
  ~AcceptThread();  // Stop()
  AcceptThread(const AcceptThread&) = delete;
  AcceptThread& operator=(const AcceptThread&) = delete;

  void Stop();  // idempotent

 private:
  AcceptThread(int listen_fd, int wake_fd, std::string name, std::function<void(int)> on_accept);
  void Run();

  const int listen_fd_;
  const int wake_fd_;  // eventfd: Stop() makes it readable
  const std::string name_;
  const std::function<void(int)> on_accept_;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace drover::sdk
