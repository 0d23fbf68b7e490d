// EncodingCache: an event's wire form, made once and reused while the event is fanned out to
// every watcher. The watch servers keep one each (the gRPC pump, each HTTP io thread): a cache
// that one thread alone uses needs no lock. It keeps the newest `keep` events, holding each
// (EventPtr) so that its address names it for as long as it is a key. Not thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <unordered_map>
#include <utility>

#include "registry/registry.h"

namespace drover::registry {

template <typename Encoding>
class EncodingCache {
 public:
  explicit EncodingCache(std::size_t keep) : keep_(keep) {}

  // The encoding of `event`, made by `encode(const Event&)` the first time.
  template <typename Encode>
  const Encoding& Get(const EventPtr& event, Encode&& encode) {
    if (auto it = encoded_.find(event.get()); it != encoded_.end()) return it->second;
    if (order_.size() >= keep_) {
      encoded_.erase(order_.front().get());
      order_.pop_front();
    }
    order_.push_back(event);
    return encoded_.emplace(event.get(), encode(*event)).first->second;
  }

 private:
  const std::size_t keep_;
  std::unordered_map<const Event*, Encoding> encoded_;
  std::deque<EventPtr> order_;  // oldest first
};

}  // namespace drover::registry
