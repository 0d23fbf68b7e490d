#include "sdk/service_view.h"

#include <set>

namespace drover::sdk {

// Events of one revision share its number (a fence is a DELETE and a PUT at one revision), so an
// event at the view's own revision is still applied; applying one twice changes nothing.
Applied ServiceView::Put(router::Endpoint endpoint, std::uint64_t revision) {
  if (revision < revision_) return Applied::kStale;
  auto it = members_.find(endpoint.id);
  if (it != members_.end() && it->second.generation > endpoint.generation) {
    revision_ = revision;  // the event is consumed; the newer incarnation stays
    return Applied::kStale;
  }
  members_[endpoint.id] = std::move(endpoint);
  revision_ = revision;
  return Applied::kApplied;
}

Applied ServiceView::Delete(const std::string& id, std::uint64_t generation,
                            std::uint64_t revision) {
  if (revision < revision_) return Applied::kStale;
  revision_ = revision;
  auto it = members_.find(id);
  if (it == members_.end() || it->second.generation > generation) return Applied::kStale;
  members_.erase(it);
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
  awaiting_confirmation_ = false;
  return Applied::kApplied;
}

void ServiceView::Progress(std::uint64_t revision) {
  if (revision > revision_) revision_ = revision;
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
