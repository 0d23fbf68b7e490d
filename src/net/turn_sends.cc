#include "net/turn_sends.h"

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <cstring>
#include <type_traits>
#include <utility>

namespace drover::net {

namespace asio = boost::asio;

TurnSends* TurnSends::ForThisThread() {
  // Shared: a posted SendAll holds it, and may be destroyed unrun after this thread ended (its
  // io_context destroyed elsewhere).
  thread_local const std::shared_ptr<TurnSends> sends = [] {
    SendRing* ring = SendRing::ForThisThread();
    return ring != nullptr ? std::make_shared<TurnSends>(*ring) : nullptr;
  }();
  return sends.get();
}

asio::awaitable<long> TurnSends::Send(asio::ip::tcp::socket& socket,
                                      std::span<const asio::const_buffer> pieces) {
  return asio::async_initiate<const asio::use_awaitable_t<>, void(long)>(
      [this, &socket, pieces](auto resume) {
        static_assert(std::is_same_v<decltype(resume), Resume>);
        Add(socket, pieces, std::move(resume), nullptr);
      },
      asio::use_awaitable);
}

void TurnSends::Send(asio::ip::tcp::socket& socket, std::span<const char> bytes, Waiter& waiter) {
  const asio::const_buffer piece(bytes.data(), bytes.size());
  Add(socket, {&piece, 1}, std::nullopt, &waiter);
}

void TurnSends::Add(asio::ip::tcp::socket& socket, std::span<const asio::const_buffer> pieces,
                    std::optional<Resume> resume, Waiter* waiter) {
  std::size_t total = 0;
  for (const asio::const_buffer& b : pieces) total += b.size();
  if (total > kCoalescedWrite) total = 0;  // the caller's to write
  std::vector<char>& bytes = filling_.bytes;
  const std::size_t offset = bytes.size();
  if (total > 0) {
    bytes.resize(offset + total);
    std::size_t at = offset;
    for (const asio::const_buffer& b : pieces) {
      if (b.size() == 0) continue;  // (an empty buffer's data may be null)
      std::memcpy(bytes.data() + at, b.data(), b.size());
      at += b.size();
    }
  }
  filling_.entries.push_back(Entry{&socket, offset, total, kNotSent, std::move(resume), waiter});
  if (posted_) return;
  posted_ = true;
  // Posted behind the handlers the loop holds now: this turn's other completions run first, and
  // add their sends. Unrun (the io_context destroyed first), it destroys the waiters it was to
  // resume -- their coroutines end there, as every other pending handler's do.
  struct Round {
    std::shared_ptr<TurnSends> sends;
    bool ran = false;
    explicit Round(std::shared_ptr<TurnSends> s) : sends(std::move(s)) {}
    Round(Round&& o) noexcept : sends(std::move(o.sends)), ran(o.ran) {}
    ~Round() {
      if (sends && !ran) {
        sends->posted_ = false;
        Batch doomed = std::exchange(sends->filling_, {});
        for (Entry& e : doomed.entries) {
          if (e.waiter != nullptr) e.waiter->Dropped();
        }
      }
    }
  };
  asio::post(socket.get_executor(), [round = Round(shared_from_this())]() mutable {
    round.ran = true;
    round.sends->SendAll();
  });
}

void TurnSends::SendAll() {
  posted_ = false;
  // A waiter resumed below may Send() again at once: that goes into a fresh batch, with a round
  // of its own.
  Batch batch = std::exchange(filling_, std::move(spare_));  // (spare_ is kept empty)
  sends_.clear();
  sent_.clear();
  for (std::size_t i = 0; i < batch.entries.size(); ++i) {
    Entry& e = batch.entries[i];
    if (e.size == 0 || !e.socket->is_open()) continue;
    sends_.push_back(
        SendRing::Send{e.socket->native_handle(), batch.bytes.data() + e.offset, e.size, 0});
    sent_.push_back(i);
  }
  if (!sends_.empty()) ring_.SendAll(sends_);
  for (std::size_t k = 0; k < sends_.size(); ++k) batch.entries[sent_[k]].result = sends_[k].result;
  for (Entry& e : batch.entries) {
    if (e.waiter != nullptr) {
      e.waiter->Sent(e.result, {batch.bytes.data() + e.offset, e.size});
    } else {
      std::move (*e.resume)(e.result);
    }
  }
  batch.entries.clear();
  batch.bytes.clear();
  if (batch.bytes.capacity() > kKeptBytes) std::vector<char>().swap(batch.bytes);
  spare_ = std::move(batch);
}

}  // namespace drover::net
