// Many small non-blocking sends, on as many sockets, handed to the kernel in one system call
// (io_uring) where a burst would otherwise cost a `send` each: the HTTP server's streams (one
// registry watch event goes to a thousand clients at once) and its late replies (one commit
// answers many writes at once).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace drover::net {

class SendRing {
 public:
  // One send: `size` bytes from `data` on `fd`, as `send(fd, data, size, MSG_DONTWAIT |
  // MSG_NOSIGNAL)` would do it -- never waiting for room. `result` is what that call would
  // return: the bytes taken (perhaps fewer than `size`), or -errno (-EAGAIN: no room at all).
  struct Send {
    int fd = -1;
    const void* data = nullptr;
    std::size_t size = 0;
    long result = 0;
  };

  // The calling thread's ring, made on its first call; null where there is none: Linux without
  // io_uring (or one that refuses it to this process, as container sandboxes often do), a build
  // without liburing, or DROVER_IO_URING=off in the environment (the escape hatch; read once per
  // process). The ring belongs to the thread (only it submits) and goes when the thread ends.
  static SendRing* ForThisThread();

  ~SendRing();
  SendRing(const SendRing&) = delete;
  SendRing& operator=(const SendRing&) = delete;

  // Makes every send and sets its `result`; returns once all are done, in as few system calls as
  // the ring's size allows (one for up to kEntries). The sends are independent: one socket's
  // error or lack of room does not stop the others.
  void SendAll(std::span<Send> sends);

  static constexpr unsigned kEntries = 256;

 private:
  struct Ring;
  explicit SendRing(std::unique_ptr<Ring> ring);
  static std::unique_ptr<SendRing> Make();  // null where there is no ring
  std::unique_ptr<Ring> ring_;
};

}  // namespace drover::net
