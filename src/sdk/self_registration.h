// SelfRegistration: a part of the fleet itself (a gateway, a rollout agent) registered in the
// registry like any server, so that the dashboard and `drover deploy --agents` find it there.
//
// The part serves whether or not discovery knows it: Start() returns at once, and a background
// thread registers (ServerHost: READY with a generation, heartbeats, re-registration after a
// lapse), trying again with backoff (1 s doubling to 30 s) while the registry cannot be reached,
// and giving up only on options that can never work. Stop() leaves discovery (DRAINING,
// deregister, the propagation delay) if registered; idempotent, and called by the destructor.
//
// Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "drover/host.h"

namespace drover::sdk {

class SelfRegistration {
 public:
  // `what` names the part in logs ("agent", "gateway"); `options` as for ServerHost.
  static std::unique_ptr<SelfRegistration> Start(std::string what, HostOptions options);
  ~SelfRegistration();
  SelfRegistration(const SelfRegistration&) = delete;
  SelfRegistration& operator=(const SelfRegistration&) = delete;

  void Stop();

  struct Impl;

 private:
  explicit SelfRegistration(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::sdk
