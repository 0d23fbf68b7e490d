// SessionServer: the TCP listener a ServerHost owns and the sessions it serves, one thread per
// session (a zone server holds a few hundred long-lived player sessions, not a million). A thread
// whose session ended waits a while for the next one (up to kIdleThreads wait, each up to
// kIdleKeep): a burst of short sessions -- a login storm, players reconnecting -- costs no thread
// creation and teardown per session, which was most of a zone server's CPU per short session
// (page tables for the new stack, its unmapping and the TLB shootdowns that follow).
//
// Life cycle, driven by the host (SDK-1, SDK-4):
//   Open()/Adopt()  the listening socket exists; connects queue in the backlog
//   Serve(handler)  an accept thread starts; every connection runs `handler` on its own thread
//   StopAccepting() the accept thread ends and the listener closes; connections already in the
//                   backlog are accepted and served first, so none is reset
//   Drain(budget)   waits for sessions to end; when the budget runs out, the sockets left are
//                   shut down (their handlers' reads fail and they return), then all are joined
// Handlers must return once a read or write on their socket fails. Thread-safe; every method
// may be called from any thread, the life-cycle steps in the order above.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "drover/clock.h"
#include "drover/host.h"
#include "drover/mutex.h"
#include "drover/status.h"
#include "sdk/accept_thread.h"

namespace drover::sdk {

struct DrainResult {
  std::size_t finished = 0;  // sessions that ended by themselves during the drain
  std::size_t cut = 0;       // sessions still open at the deadline, shut down
};

class SessionServer {
 public:
  SessionServer() = default;
  ~SessionServer();  // StopAccepting() + Drain(0)
  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  // Binds and listens on IPv4 host:port (port 0: a free port).
  Status Open(const std::string& address);
  // Takes ownership of a socket that is already bound and listening.
  Status Adopt(int listen_fd);
  // The bound "ip:port".
  const std::string& address() const { return address_; }

  void Serve(std::function<void(Session&)> handler);
  void StopAccepting();  // idempotent
  DrainResult Drain(Duration budget);

  std::size_t active() const;
  std::uint64_t served() const { return served_.load(); }
  // Threads that exist now, serving or waiting for a session (for tests).
  std::size_t threads() const;

  static constexpr std::size_t kIdleThreads = 64;
  static constexpr auto kIdleKeep = std::chrono::seconds(5);

 private:
  struct Entry {
    Session session;
    bool done = false;  // guarded by mu_ (the server's, which an annotation here cannot name)
  };
  struct Worker {
    std::thread thread;
    bool exited = false;  // guarded by mu_: past its last use of mu_
  };

  void Launch(int fd);  // serves one accepted connection
  // A worker thread: serves `first`, then each session handed to it while it waits.
  void Work(Entry* first, Worker* self);
  // Joins exited workers, letting go of mu_ while it waits for their threads.
  void ReapLocked() DROVER_REQUIRES(mu_);

  int listen_fd_ = -1;
  std::string address_;
  std::function<void(Session&)> handler_;
  std::atomic<bool> draining_{false};
  std::atomic<std::uint64_t> served_{0};
  std::unique_ptr<AcceptThread> acceptor_;  // calls Launch for each connection
  std::once_flag stop_accepting_once_;

  mutable Mutex mu_;
  CondVar changed_;                                   // a session ended
  CondVar handed_;                                    // a session waits in ready_, or stopping_
  std::list<Entry> sessions_ DROVER_GUARDED_BY(mu_);  // list: entries never move
  std::list<Worker> workers_ DROVER_GUARDED_BY(mu_);
  std::list<Entry*> ready_ DROVER_GUARDED_BY(mu_);  // accepted, for an idle worker to take
  std::size_t idle_ DROVER_GUARDED_BY(mu_) = 0;     // workers waiting for a session
  bool stopping_ DROVER_GUARDED_BY(mu_) = false;    // Drain: idle workers exit
};

}  // namespace drover::sdk
