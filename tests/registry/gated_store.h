// A registry Store for tests: commits wait until the test lets them go.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "drover/mutex.h"
#include "registry/forwarding_store.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"

namespace drover::registry {

// A store whose first commit waits until the test lets it go: the writes queued meanwhile are
// what the next batch holds, so batching is observed, not hoped for.
class GatedStore final : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<std::vector<Result<std::uint64_t>>> CommitBatch(
      const std::vector<std::vector<Write>>& batch) override {
    {
      MutexLock lock(mu_);
      batches_.push_back(batch.size());
      cv_.Wait(mu_, [&]() DROVER_REQUIRES(mu_) { return open_; });
    }
    return inner_->CommitBatch(batch);
  }
  void Open() {
    MutexLock lock(mu_);
    open_ = true;
    cv_.NotifyAll();
  }
  std::vector<std::size_t> batches() {
    MutexLock lock(mu_);
    return batches_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool open_ DROVER_GUARDED_BY(mu_) = false;
  std::vector<std::size_t> batches_ DROVER_GUARDED_BY(mu_);
};

// A registry on SQLite in `dir` whose commits go through a GatedStore, which `gated` is set to;
// null (and `gated` unset) when either fails to open.
inline std::unique_ptr<Registry> OpenGatedRegistry(const std::string& dir, Clock& clock,
                                                   GatedStore*& gated) {
  auto sqlite = SqliteStore::Open(dir);
  if (!sqlite.ok()) return nullptr;
  auto store = std::make_unique<GatedStore>(std::move(*sqlite));
  GatedStore* raw = store.get();
  auto opened = Registry::Open(std::move(store), clock);
  if (!opened.ok()) return nullptr;
  gated = raw;
  return std::move(*opened);
}

}  // namespace drover::registry
