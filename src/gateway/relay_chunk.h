// RelayChunk: a 64 KiB buffer for moving bytes between two sockets, borrowed from a per-thread
// free list. A relay holds one only while it has bytes to move and gives it back before it waits
// again, so an idle connection holds no buffer at all (HAProxy allocates its buffers on demand
// the same way) and a busy one costs no malloc per chunk.
//
// Each thread has its own list (no lock); a chunk returns to the list of the thread that
// destroys it. A list keeps at most kKeptPerThread chunks; the rest are freed.
#pragma once

#include <cstddef>
#include <memory>

namespace drover::gateway {

class RelayChunk {
 public:
  static constexpr std::size_t kSize = 64 * 1024;
  static constexpr std::size_t kKeptPerThread = 64;  // 4 MiB per io thread at most

  RelayChunk();   // from this thread's list, or newly allocated
  ~RelayChunk();  // back to this thread's list, or freed when the list is full
  RelayChunk(const RelayChunk&) = delete;
  RelayChunk& operator=(const RelayChunk&) = delete;
  RelayChunk(RelayChunk&&) noexcept = default;  // e.g. into the handler of a pending write
  RelayChunk& operator=(RelayChunk&&) = delete;

  char* data() { return data_.get(); }
  static constexpr std::size_t size() { return kSize; }

  // Chunks on this thread's list now (for tests).
  static std::size_t KeptOnThisThread();

 private:
  std::unique_ptr<char[]> data_;
};

}  // namespace drover::gateway
