#include "gateway/relay_chunk.h"

#include <vector>

namespace drover::gateway {
namespace {

std::vector<std::unique_ptr<char[]>>& FreeList() {
  thread_local std::vector<std::unique_ptr<char[]>> list;
  return list;
}

}  // namespace

RelayChunk::RelayChunk() {
  auto& list = FreeList();
  if (list.empty()) {
    data_.reset(new char[kSize]);
  } else {
    data_ = std::move(list.back());
    list.pop_back();
  }
}

RelayChunk::~RelayChunk() {
  auto& list = FreeList();
  if (data_ && list.size() < kKeptPerThread) list.push_back(std::move(data_));
}

std::size_t RelayChunk::KeptOnThisThread() { return FreeList().size(); }

}  // namespace drover::gateway
