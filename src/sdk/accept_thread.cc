#include "sdk/accept_thread.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace drover::sdk {

Result<std::unique_ptr<AcceptThread>> AcceptThread::Start(int listen_fd, std::string name,
                                                          std::function<void(int)> on_accept) {
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return InternalError(name + ": eventfd failed: " + std::strerror(errno));
  return std::unique_ptr<AcceptThread>(
      new AcceptThread(listen_fd, wake, std::move(name), std::move(on_accept)));
}

AcceptThread::AcceptThread(int listen_fd, int wake_fd, std::string name,
                           std::function<void(int)> on_accept)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      name_(std::move(name)),
      on_accept_(std::move(on_accept)),
      thread_([this] { Run(); }) {}

AcceptThread::~AcceptThread() {
  Stop();
  ::close(wake_fd_);
}

void AcceptThread::Stop() {
  if (!thread_.joinable()) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  thread_.join();
}

void AcceptThread::Run() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("{}: poll failed: {}", name_, std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      on_accept_(fd);
      continue;
    }
    if (errno == EMFILE || errno == ENFILE) {
      spdlog::warn("{}: out of file descriptors; connections wait in the backlog", name_);
      ::poll(nullptr, 0, 100);
    }
    // Otherwise the client left before it was accepted: nothing to do.
  }
}

}  // namespace drover::sdk
