#include "sdk/watch_decoder.h"

#include <algorithm>

#include "drover/discovery.h"

namespace drover::sdk {
namespace {

namespace pb = ::drover::registry::v1;

router::EndpointState ToState(pb::State state) {
  switch (state) {
    case pb::READY:
      return router::EndpointState::kReady;
    case pb::DRAINING:
      return router::EndpointState::kDraining;
    default:
      return router::EndpointState::kStarting;
  }
}

}  // namespace

router::Endpoint EndpointFromProto(const pb::Instance& in, const Clock& clock) {
  router::Endpoint e;
  e.id = in.id();
  e.address = in.spec().address();
  e.weight = in.spec().weight();
  e.zone = in.spec().zone();
  e.state = ToState(in.spec().state());
  e.accepting = in.spec().accepting();
  e.generation = in.spec().generation();
  if (auto it = in.spec().labels().find(std::string(kHealthLabel));
      it != in.spec().labels().end()) {
    e.health = it->second;
  }
  if (in.ready_since_ms() != 0) {
    // In milliseconds, clamped to [0, now]: a time beyond the clock's range (a corrupted stream,
    // found by fuzzing) must not overflow the conversion to nanoseconds.
    const std::int64_t now_ms = ToUnixMillis(clock.SystemNow());
    const std::int64_t since_ms = std::clamp<std::int64_t>(in.ready_since_ms(), 0, now_ms);
    e.ready_since = clock.Now() - std::chrono::milliseconds(now_ms - since_ms);
  }
  return e;
}

Applied ApplyWatchEvent(ServiceView& view, const pb::Event& event, const Clock& clock,
                        bool& degraded) {
  switch (event.type()) {
    case pb::Event::PUT:
      return view.Put(EndpointFromProto(event.instance(), clock), event.revision());
    case pb::Event::DELETE:
      return view.Delete(event.instance().id(), event.instance().spec().generation(),
                         event.revision());
    case pb::Event::RESYNC: {
      std::vector<router::Endpoint> endpoints;
      for (const pb::Instance& in : event.snapshot()) {
        endpoints.push_back(EndpointFromProto(in, clock));
      }
      degraded = event.degraded();
      return view.Replace(std::move(endpoints), event.revision(), false);
    }
    case pb::Event::PROGRESS:
      degraded = event.degraded();
      view.Progress(event.revision());
      return Applied::kApplied;
    default:
      return Applied::kStale;
  }
}

}  // namespace drover::sdk
