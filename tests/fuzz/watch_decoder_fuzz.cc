// The discovery client's watch-stream decoder: bytes as a registry watch event (protobuf), then
// applied to a service view -- and a short stream of them, so revisions, deletes, resyncs and
// progress interleave. The view must stay consistent whatever the registry (or a corrupted
// stream) sends.
#include <cstddef>
#include <cstdint>

#include "drover/clock.h"
#include "drover/registry/v1/registry.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "sdk/service_view.h"
#include "sdk/watch_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Invalid UTF-8 in a string field is a parse failure; protobuf's log line about it is noise.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  drover::FakeClock clock;
  drover::sdk::ServiceView view("zone");
  bool degraded = false;
  // Each event is a length byte and that many bytes.
  std::size_t at = 0;
  for (int events = 0; at < size && events < 16; ++events) {
    const std::size_t n = std::min<std::size_t>(data[at], size - at - 1);
    drover::registry::v1::Event event;
    if (event.ParseFromArray(data + at + 1, static_cast<int>(n))) {
      (void)drover::sdk::ApplyWatchEvent(view, event, clock, degraded);
      (void)view.revision();
    }
    at += 1 + n;
  }
  return 0;
}
