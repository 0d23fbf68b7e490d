#include "drover/router.h"

namespace drover::router {
namespace {

std::shared_ptr<const RouterSnapshot> BuildSnapshot(std::shared_ptr<const RoutingTable> table,
                                                    const RouterOptions& options) {
  auto snapshot = std::make_shared<RouterSnapshot>();
  if (options.build_ring) snapshot->ring = RingHash::Build(*table, options.ring);
  if (options.build_maglev) snapshot->maglev = Maglev::Build(*table, options.maglev);
  snapshot->p2c = P2cPicker::Build(*table, options.slow_start);
  snapshot->table = std::move(table);
  return snapshot;
}

}  // namespace

Router::Router(RouterOptions options) : options_(std::move(options)) {
  current_.Store(BuildSnapshot(RoutingTable::Create(0, {}).value(), options_));
}

Result<std::uint64_t> Router::Update(std::vector<Endpoint> endpoints) {
  MutexLock lock(update_mu_);
  DROVER_ASSIGN_OR_RETURN(auto table,
                          RoutingTable::Create(last_version_ + 1, std::move(endpoints)));
  // Built before publishing, outside any reader's path: readers only ever see finished tables.
  current_.Store(BuildSnapshot(std::move(table), options_));
  return ++last_version_;
}

Status Router::Publish(std::shared_ptr<const RoutingTable> table) {
  if (!table) return InvalidArgumentError("router: no table");
  MutexLock lock(update_mu_);
  // A table of the last version replaces it: a revision's events arrive one by one, and each
  // table of it holds more of them.
  if (table->version() < last_version_) {
    return FailedPreconditionError("router: table version " + std::to_string(table->version()) +
                                   " is older than " + std::to_string(last_version_));
  }
  last_version_ = table->version();
  current_.Store(BuildSnapshot(std::move(table), options_));
  return Status::Ok();
}

}  // namespace drover::router
