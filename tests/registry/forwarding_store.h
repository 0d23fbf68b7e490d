// A registry Store for tests that hands every call to another store: the base of the test stores
// that change one step (GatedStore's commits, a held feed) and leave the rest as the real one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "drover/clock.h"
#include "registry/store.h"

namespace drover::registry {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}

  Result<StoreState> Load() override { return inner_->Load(); }
  Result<std::uint64_t> Commit(const std::vector<Write>& writes) override {
    return inner_->Commit(writes);
  }
  Result<std::vector<Result<std::uint64_t>>> CommitBatch(
      const std::vector<std::vector<Write>>& batch) override {
    return inner_->CommitBatch(batch);
  }
  Status PruneTombstones(const std::vector<Tombstone>& expired) override {
    return inner_->PruneTombstones(expired);
  }
  Result<std::optional<StoredDeploy>> GetDeploy(const std::string& id) override {
    return inner_->GetDeploy(id);
  }
  Result<std::vector<StoredDeploy>> ListDeploys(const std::string& service,
                                                std::size_t limit) override {
    return inner_->ListDeploys(service, limit);
  }
  Result<std::uint64_t> PutDeploy(const StoredDeploy& deploy,
                                  std::uint64_t expect_version) override {
    return inner_->PutDeploy(deploy, expect_version);
  }
  bool shared() const override { return inner_->shared(); }
  Status Follow(std::uint64_t revision, StoreListener* listener) override {
    return inner_->Follow(revision, listener);
  }
  Status WaitDelivered(std::uint64_t revision, Duration timeout) override {
    return inner_->WaitDelivered(revision, timeout);
  }
  Result<std::uint64_t> Head() override { return inner_->Head(); }
  bool consecutive_revisions() const override { return inner_->consecutive_revisions(); }
  bool Expirer() const override { return inner_->Expirer(); }
  Result<std::uint64_t> CommitAsExpirer(const std::vector<Write>& writes) override {
    return inner_->CommitAsExpirer(writes);
  }
  Status ShareDegraded(const std::vector<std::string>& services) override {
    return inner_->ShareDegraded(services);
  }
  void ShareRenewals(const std::vector<LeaseRenewal>& renewals) override {
    inner_->ShareRenewals(renewals);
  }
  Duration RenewalDelay() const override { return inner_->RenewalDelay(); }

 protected:
  std::unique_ptr<Store> inner_;
};

}  // namespace drover::registry
