#include "sdk/session_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "sdk/socket_util.h"

namespace drover::sdk {
namespace {

std::string PeerAddress(const sockaddr_in& addr) {
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

}  // namespace

SessionServer::~SessionServer() {
  StopAccepting();
  Drain(Duration::zero());
}

Status SessionServer::Open(const std::string& address) {
  auto listening = ListenTcp(address, 1024, "sessions");
  if (!listening.ok()) return listening.status();
  return Adopt(listening->fd);
}

Status SessionServer::Adopt(int listen_fd) {
  if (listen_fd_ >= 0) return FailedPreconditionError("sessions: already listening");
  int accepting = 0;
  socklen_t len = sizeof accepting;
  if (::getsockopt(listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) {
    return InvalidArgumentError("sessions: descriptor " + std::to_string(listen_fd) +
                                " is not a listening socket");
  }
  listen_fd_ = listen_fd;
  address_ = LocalAddress(listen_fd);
  return Status::Ok();
}

void SessionServer::Serve(std::function<void(Session&)> handler) {
  handler_ = std::move(handler);
  auto acceptor = AcceptThread::Start(listen_fd_, "sessions", [this](int fd) { Launch(fd); });
  if (!acceptor.ok()) {
    spdlog::error("sessions: cannot accept: {}", acceptor.status().message());
    return;
  }
  acceptor_ = std::move(*acceptor);
}

void SessionServer::Launch(int fd) {
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len);
  MutexLock lock(mu_);
  ReapLocked();
  Entry& entry = sessions_.emplace_back(Entry{Session(fd, PeerAddress(peer), draining_)});
  served_.fetch_add(1);
  if (idle_ > ready_.size() && !stopping_) {  // a waiting worker takes it
    ready_.push_back(&entry);
    handed_.NotifyOne();
    return;
  }
  Worker& worker = workers_.emplace_back();
  worker.thread = std::thread([this, &entry, &worker] { Work(&entry, &worker); });
}

void SessionServer::Work(Entry* entry, Worker* self) {
  while (true) {
    try {
      handler_(entry->session);
    } catch (const std::exception& e) {
      spdlog::error("sessions: handler for {} threw: {}", entry->session.peer(), e.what());
    } catch (...) {
      spdlog::error("sessions: handler for {} threw", entry->session.peer());
    }
    ::close(entry->session.fd());
    MutexLock lock(mu_);
    entry->done = true;
    changed_.NotifyAll();
    // The next session, unless enough threads wait already, none comes in time, or the server
    // stops.
    if (!stopping_ && idle_ < kIdleThreads) {
      ++idle_;
      handed_.WaitUntil(mu_, std::chrono::steady_clock::now() + kIdleKeep,
                        [this]() DROVER_REQUIRES(mu_) { return !ready_.empty() || stopping_; });
      --idle_;
    }
    if (ready_.empty()) {
      self->exited = true;  // (the last use of mu_ is this lock's release)
      return;
    }
    entry = ready_.front();
    ready_.pop_front();
  }
}

void SessionServer::ReapLocked() {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->done ? sessions_.erase(it) : std::next(it);
  }
  std::list<Worker> exited;
  for (auto it = workers_.begin(); it != workers_.end();) {
    auto next = std::next(it);
    if (it->exited) exited.splice(exited.end(), workers_, it);
    it = next;
  }
  if (exited.empty()) return;
  mu_.unlock();
  for (Worker& w : exited) w.thread.join();  // exited: the thread is past its last use of mu_
  mu_.lock();
}

void SessionServer::StopAccepting() {
  std::call_once(stop_accepting_once_, [this] {
    if (listen_fd_ < 0) return;
    if (acceptor_) {
      acceptor_->Stop();
      // Connections the kernel completed but nobody accepted yet would be reset by close():
      // serve them instead. After this sweep, new connects are refused.
      const int flags = ::fcntl(listen_fd_, F_GETFL);
      ::fcntl(listen_fd_, F_SETFL, flags | O_NONBLOCK);
      while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) break;
        // The accepted socket must block like the others (accept4 does not inherit O_NONBLOCK
        // on Linux, but say so explicitly).
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        Launch(fd);
      }
    }
    ::close(listen_fd_);
  });
}

DrainResult SessionServer::Drain(Duration budget) {
  draining_.store(true);
  DrainResult result;
  MutexLock lock(mu_);
  std::size_t before = 0;
  for (const Entry& e : sessions_) before += e.done ? 0 : 1;
  changed_.WaitFor(mu_, budget, [&]() DROVER_REQUIRES(mu_) {
    for (const Entry& e : sessions_) {
      if (!e.done) return false;
    }
    return true;
  });
  for (Entry& e : sessions_) {
    if (!e.done) {
      ::shutdown(e.session.fd(), SHUT_RDWR);  // its handler's next read returns 0
      ++result.cut;
    }
  }
  // Every worker ends: the waiting ones now, the others once their session returns.
  stopping_ = true;
  handed_.NotifyAll();
  std::list<Worker> all;
  all.splice(all.end(), workers_);
  lock.Unlock();
  for (Worker& w : all) w.thread.join();
  lock.Lock();
  sessions_.clear();
  ready_.clear();  // (none: a session is handed only while a worker waits for it)
  result.finished = before - result.cut;
  return result;
}

std::size_t SessionServer::threads() const {
  MutexLock lock(mu_);
  std::size_t n = 0;
  for (const Worker& w : workers_) n += w.exited ? 0 : 1;
  return n;
}

std::size_t SessionServer::active() const {
  MutexLock lock(mu_);
  std::size_t n = 0;
  for (const Entry& e : sessions_) n += e.done ? 0 : 1;
  return n;
}

}  // namespace drover::sdk
