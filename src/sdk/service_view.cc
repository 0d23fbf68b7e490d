#include "sdk/service_view.h"

#include <set>

namespace drover::sdk {

// Events of one revision share its number (a fence is a DELETE and a PUT at one revision; on etcd
// a group of writes commits at one revision), so an event at the view's own revision is still
// applied; applying one twice changes nothing.
bool ServiceView::FirstTime(char type, const std::string& id, std::uint64_t generation,
                            std::uint64_t revision) {
  if (revision > revision_) newest_.clear();
  return newest_.insert(type + std::to_string(generation) + ":" + id).second;
}

void ServiceView::Advance(std::uint64_t revision) {
  // The first event of a newer revision: every event of the older ones has been seen.
  if (revision > revision_) complete_ = revision_;
  revision_ = revision;
}

Applied ServiceView::Put(router::Endpoint endpoint, std::uint64_t revision) {
  if (revision < revision_) return Applied::kStale;
  if (!FirstTime('P', endpoint.id, endpoint.generation, revision)) return Applied::kRepeated;
  Advance(revision);
  auto it = members_.find(endpoint.id);
  if (it != members_.end() && it->second.generation > endpoint.generation) {
    return Applied::kStale;  // the event is consumed; the newer incarnation stays
  }
  members_[endpoint.id] = std::move(endpoint);
  ++changes_;
  return Applied::kApplied;
}

Applied ServiceView::Delete(const std::string& id, std::uint64_t generation,
                            std::uint64_t revision) {
  if (revision < revision_) return Applied::kStale;
  if (!FirstTime('D', id, generation, revision)) return Applied::kRepeated;
  Advance(revision);
  auto it = members_.find(id);
  if (it == members_.end() || it->second.generation > generation) return Applied::kStale;
  members_.erase(it);
  ++changes_;
  return Applied::kApplied;
}

Applied ServiceView::Replace(std::vector<router::Endpoint> endpoints, std::uint64_t revision,
                             bool confirmed) {
  if (revision < revision_) return Applied::kStale;
  if (!confirmed && DropsTooMuch(endpoints)) {
    awaiting_confirmation_ = true;
    return Applied::kNeedsConfirmation;
  }
  members_.clear();
  for (router::Endpoint& e : endpoints) {
    std::string id = e.id;
    members_.emplace(std::move(id), std::move(e));
  }
  revision_ = revision;
  complete_ = revision;  // a whole service
  newest_.clear();
  ++changes_;
  awaiting_confirmation_ = false;
  return Applied::kApplied;
}

void ServiceView::Progress(std::uint64_t revision) {
  if (revision < revision_) return;
  if (revision > revision_) newest_.clear();
  revision_ = revision;
  complete_ = revision;  // nothing more up to it
}

bool ServiceView::DropsTooMuch(const std::vector<router::Endpoint>& next) const {
  if (members_.empty()) return false;
  if (next.empty()) return true;
  std::set<std::string_view> kept;
  for (const router::Endpoint& e : next) kept.insert(e.id);
  std::size_t dropped = 0;
  for (const auto& [id, e] : members_) dropped += kept.contains(id) ? 0 : 1;
  return static_cast<double>(dropped) >
         options_.max_drop_fraction * static_cast<double>(members_.size());
}

Result<std::shared_ptr<const router::RoutingTable>> ServiceView::Table() const {
  std::vector<router::Endpoint> endpoints;
  endpoints.reserve(members_.size());
  for (const auto& [id, e] : members_) endpoints.push_back(e);
  return router::RoutingTable::Create(revision_, std::move(endpoints));
}

}  // namespace drover::sdk
