#include "net/send_ring.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>

#ifdef DROVER_HAVE_URING
#include <liburing.h>
#endif

namespace drover::net {
namespace {

long PlainSend(const SendRing::Send& s) {
  ssize_t n = 0;
  do {
    n = ::send(s.fd, s.data, s.size, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n < 0 ? -errno : static_cast<long>(n);
}

bool Allowed() {
  static const bool allowed = [] {
    const char* env = std::getenv("DROVER_IO_URING");
    if (env == nullptr) return true;
    const std::string_view v(env);
    return !(v == "off" || v == "0" || v == "no" || v == "false");
  }();
  return allowed;
}

}  // namespace

#ifdef DROVER_HAVE_URING

struct SendRing::Ring {
  io_uring ring{};
  bool broken = false;  // the kernel failed a submission: sends go one by one from then on
};

std::unique_ptr<SendRing> SendRing::Make() {
  if (!Allowed()) return nullptr;
  auto ring = std::make_unique<Ring>();
  io_uring_params params{};
  // Only this thread submits, and nothing here waits for completions that come later.
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL;
  int rc = io_uring_queue_init_params(kEntries, &ring->ring, &params);
  if (rc == -EINVAL) {  // a kernel older than 6.1 knows some of those flags
    params = io_uring_params{};
    rc = io_uring_queue_init_params(kEntries, &ring->ring, &params);
  }
  if (rc < 0) {
    static std::once_flag logged;
    std::call_once(logged, [rc] {
      spdlog::info(
          "io_uring unavailable ({}): what goes to many clients at once goes one send each",
          std::strerror(-rc));
    });
    return nullptr;
  }
  return std::unique_ptr<SendRing>(new SendRing(std::move(ring)));
}

SendRing::~SendRing() { io_uring_queue_exit(&ring_->ring); }

void SendRing::SendAll(std::span<Send> sends) {
  io_uring* ring = &ring_->ring;
  std::size_t from = 0;
  while (from < sends.size() && !ring_->broken) {
    const std::size_t count = std::min<std::size_t>(kEntries, sends.size() - from);
    for (std::size_t i = 0; i < count; ++i) {
      Send& s = sends[from + i];
      s.result = LONG_MIN;                         // not done yet
      io_uring_sqe* sqe = io_uring_get_sqe(ring);  // never null: the ring was empty
      // MSG_DONTWAIT: a socket without room answers -EAGAIN at once, as a non-blocking send
      // does, rather than the ring waiting for room on our behalf.
      io_uring_prep_send(sqe, s.fd, s.data, s.size, MSG_DONTWAIT | MSG_NOSIGNAL);
      io_uring_sqe_set_data64(sqe, from + i);
    }
    std::size_t submitted = 0;
    while (submitted < count) {
      const int rc = io_uring_submit(ring);
      if (rc > 0) {
        submitted += static_cast<std::size_t>(rc);
      } else if (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // What was not taken stays queued; the ring is never entered again, so it never goes.
        spdlog::error("io_uring submission failed ({}): sends go one by one from now on",
                      std::strerror(-rc));
        ring_->broken = true;
        break;
      }
    }
    std::size_t reaped = 0;
    while (reaped < submitted) {
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(ring, &cqe);  // inline completions: already there
      if (rc == -EINTR) continue;
      if (rc < 0) {
        spdlog::error("io_uring completion lost ({}): its sends count as failed",
                      std::strerror(-rc));
        ring_->broken = true;
        break;
      }
      unsigned head = 0;
      unsigned seen = 0;
      io_uring_for_each_cqe(ring, head, cqe) {
        sends[io_uring_cqe_get_data64(cqe)].result = cqe->res;
        ++seen;
      }
      io_uring_cq_advance(ring, seen);
      reaped += seen;
    }
    if (ring_->broken) {
      for (std::size_t i = 0; i < count; ++i) {
        Send& s = sends[from + i];
        if (s.result != LONG_MIN) continue;
        // Submitted and never reported: whether it went is unknown, so the stream must end.
        s.result = i < submitted ? -EIO : PlainSend(s);
      }
    }
    from += count;
  }
  for (; from < sends.size(); ++from) sends[from].result = PlainSend(sends[from]);
}

#else  // no liburing in this build

struct SendRing::Ring {
  bool broken = false;
};

std::unique_ptr<SendRing> SendRing::Make() {
  (void)Allowed;
  return nullptr;
}
SendRing::~SendRing() = default;
void SendRing::SendAll(std::span<Send> sends) {
  for (Send& s : sends) s.result = PlainSend(s);
}

#endif

SendRing::SendRing(std::unique_ptr<Ring> ring) : ring_(std::move(ring)) {}

SendRing* SendRing::ForThisThread() {
  thread_local const std::unique_ptr<SendRing> ring = Make();  // tried once per thread
  return ring && !ring->ring_->broken ? ring.get() : nullptr;
}

}  // namespace drover::net
