// The discovery client's decoding of the registry's watch stream: one protobuf event (or listed
// instance) into the router's terms, applied to a ServiceView. Pure (no I/O, no threads), so it
// is fuzzed on its own (tests/fuzz/).
#pragma once

#include "drover/clock.h"
#include "drover/registry/v1/registry.pb.h"
#include "drover/router.h"
#include "sdk/service_view.h"

namespace drover::sdk {

// One registry instance as a router endpoint. The registry's wall-clock READY time becomes a
// point on this process's monotonic clock (for slow start); a skew into the future is "now", a
// negative time is "long ago".
router::Endpoint EndpointFromProto(const registry::v1::Instance& in, const Clock& clock);

// Applies one watch event to `view`. RESYNC and PROGRESS carry the service's degraded flag,
// written to `degraded`. Unknown event types change nothing (kStale).
Applied ApplyWatchEvent(ServiceView& view, const registry::v1::Event& event, const Clock& clock,
                        bool& degraded);

}  // namespace drover::sdk
