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
  Entry& entry = sessions_.emplace_back(Entry{Session(fd, PeerAddress(peer), draining_), {}});
  served_.fetch_add(1);
  entry.thread = std::thread([this, &entry] {
    try {
      handler_(entry.session);
    } catch (const std::exception& e) {
      spdlog::error("sessions: handler for {} threw: {}", entry.session.peer(), e.what());
    } catch (...) {
      spdlog::error("sessions: handler for {} threw", entry.session.peer());
    }
    ::close(entry.session.fd());
    MutexLock done_lock(mu_);
    entry.done = true;
    changed_.NotifyAll();
  });
}

void SessionServer::ReapLocked() {
  std::list<Entry> finished;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto next = std::next(it);
    if (it->done) finished.splice(finished.end(), sessions_, it);
    it = next;
  }
  mu_.unlock();
  for (Entry& e : finished) e.thread.join();  // done: the thread is past its last use of mu_
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
  const std::size_t before = sessions_.size();
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
  std::list<Entry> all;
  all.splice(all.end(), sessions_);
  lock.Unlock();
  for (Entry& e : all) e.thread.join();
  result.finished = before - result.cut;
  return result;
}

std::size_t SessionServer::active() const {
  MutexLock lock(mu_);
  std::size_t n = 0;
  for (const Entry& e : sessions_) n += e.done ? 0 : 1;
  return n;
}

}  // namespace drover::sdk
