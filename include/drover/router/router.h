// The Router: builds a RouterSnapshot -- a RoutingTable plus the pickers built from it (ring,
// Maglev, P2C) -- for every endpoint-list update and publishes it through Published<T>. The
// Router owns its options and the current snapshot; each snapshot owns its pickers and shares its
// table; a reader that loaded a snapshot keeps it alive for as long as it holds it. Update() and
// Publish() may be called from any thread (they are serialised); Snapshot() and NewReader() are
// safe from any number of threads concurrently with them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "drover/mutex.h"
#include "drover/router/maglev.h"
#include "drover/router/p2c.h"
#include "drover/router/published.h"
#include "drover/router/ring_hash.h"
#include "drover/router/routing_table.h"
#include "drover/status.h"

namespace drover::router {

struct RouterOptions {
  RingHashOptions ring;
  MaglevOptions maglev;
  SlowStartOptions slow_start;
  bool build_ring = true;
  bool build_maglev = true;
};

// Everything a data-path thread needs to route, built together and published as one value.
struct RouterSnapshot {
  std::shared_ptr<const RoutingTable> table;
  std::optional<RingHash> ring;
  std::optional<Maglev> maglev;
  P2cPicker p2c;

  std::uint64_t version() const { return table->version(); }
};

// Builds and publishes RouterSnapshots. Update() may be called from any thread (updates are
// serialised); Snapshot() is safe from any number of threads concurrently with Update() and
// never waits for a build.
class Router {
 public:
  explicit Router(RouterOptions options = {});

  // Publishes a table of `endpoints` with the next version. On error nothing is published.
  Result<std::uint64_t> Update(std::vector<Endpoint> endpoints);
  // Publishes a table built elsewhere (a discovery snapshot), keeping its version -- the
  // registry revision. FAILED_PRECONDITION, publishing nothing, when it is older than the last;
  // one of the same version replaces it (it holds more of that revision's events).
  Status Publish(std::shared_ptr<const RoutingTable> table);

  // The current snapshot; never null (version 0 is the initial empty table).
  std::shared_ptr<const RouterSnapshot> Snapshot() const { return current_.Load(); }

  // A per-thread reader of the current snapshot for data-path loops (see Published::Reader).
  using SnapshotReader = Published<RouterSnapshot>::Reader;
  SnapshotReader NewReader() const { return SnapshotReader(current_); }

  const RouterOptions& options() const { return options_; }

 private:
  RouterOptions options_;
  Mutex update_mu_;  // serialises Update(): versions publish in order
  std::uint64_t last_version_ DROVER_GUARDED_BY(update_mu_) = 0;
  Published<RouterSnapshot> current_;
};

}  // namespace drover::router
