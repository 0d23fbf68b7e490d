// Platform: where a service's instances run, as the deploy controller sees it (RO-1). Start an
// instance, stop one, list a service's instances with their recent lifecycle events. The local
// implementation is the Supervisor (`drover agent`), reached over HTTP through AgentClient; tests
// also use a simulated one.
//
// Like real platforms, an instance's event list is bounded (the newest `event_limit`, 5 by
// default): the health gate must never draw conclusions from its length (seed 004).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::rollout {

enum class EventKind : std::uint8_t {
  kStarted = 0,  // a process was started (detail: its pid)
  kCrashed = 1,  // it exited without being asked to (detail: exit code or signal, next try)
  kGaveUp = 2,   // too many crashes in the restart window: no more restarts
  kStopped = 3,  // it exited after being asked to stop
};
std::string_view EventKindName(EventKind kind);  // "started", "crashed", "gave_up", "stopped"
Result<EventKind> ParseEventKind(std::string_view name);

struct InstanceEvent {
  EventKind kind = EventKind::kStarted;
  SystemTime at{};
  std::string detail;

  friend bool operator==(const InstanceEvent&, const InstanceEvent&) = default;
};

// What to run. In argv and env values, "{id}", "{service}", "{version}" are replaced by the
// instance's own; argv[0] is a path or a name looked up in PATH.
struct LaunchSpec {
  std::string service;
  std::string id;
  std::string version;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;

  friend bool operator==(const LaunchSpec&, const LaunchSpec&) = default;
};

enum class InstanceStatus : std::uint8_t {
  kStarting = 0,  // not started yet, or waiting out a restart back-off
  kRunning = 1,
  kGaveUp = 2,
  kStopping = 3,
};
std::string_view InstanceStatusName(InstanceStatus status);
Result<InstanceStatus> ParseInstanceStatus(std::string_view name);

struct InstanceInfo {
  LaunchSpec spec;
  InstanceStatus status = InstanceStatus::kStarting;
  int pid = 0;                        // 0 when no process runs
  std::vector<InstanceEvent> events;  // oldest first; only the newest event_limit are kept
};

class Platform {
 public:
  virtual ~Platform() = default;
  // ALREADY_EXISTS when an instance with that id is known; INVALID_ARGUMENT for a bad spec.
  virtual Status Start(const LaunchSpec& spec) = 0;
  // Asks the instance to stop (SIGTERM: the SDK's ordered shutdown), waits up to `grace`, then
  // kills it, and forgets it. NOT_FOUND for an unknown id.
  virtual Status Stop(const std::string& id, Duration grace) = 0;
  // Every instance of `service` (every instance when empty).
  virtual Result<std::vector<InstanceInfo>> List(const std::string& service) = 0;
};

// Names for instance ids, services, versions and deploy ids: 1..128 of [A-Za-z0-9._-], not
// starting with '.' or '-' (they become file names and URL path segments).
Status ValidateName(std::string_view what, std::string_view name);
Status ValidateLaunchSpec(const LaunchSpec& spec);

}  // namespace drover::rollout
