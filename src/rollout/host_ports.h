// The placeholders of a launch spec that only the host running the instance can fill: "{port}"
// and "{health_port}" (ports free on this host) and "{host}" (the address the host is reached
// at, so that an instance binds and advertises its host's address, not loopback). The agent
// fills them when it accepts an instance, once: the filled spec is what it records, so a restart
// of the instance or of the agent reuses the same ports.
//
// Why the ports come from below the kernel's ephemeral range: an instance binds them only later
// (after its warm-up, and at every restart), and a port from ip_local_port_range -- which every
// bind to port 0 and every outgoing connection on the host draws from -- can be taken meanwhile;
// the instance then crash-loops on EADDRINUSE until its deploy fails. The picker takes ports from
// 20000 up to the start of that range (as Nomad's dynamic ports), where only explicit binds land,
// skipping a port that cannot be bound on the host's address now or was handed out already by
// this picker. When there is no such window (a range starting at or below 21000) or nothing in it
// is free, the kernel picks one.
//
// Not thread-safe: the Supervisor uses its picker under its own lock.
#pragma once

#include <cstdint>
#include <random>
#include <set>
#include <string>

#include "rollout/platform.h"

namespace drover::rollout {

class PortPicker {
 public:
  // `bind_host`: the IPv4 address ports are tried on ("0.0.0.0": every interface).
  explicit PortPicker(std::string bind_host = "127.0.0.1");

  std::uint16_t Next();

 private:
  bool Bindable(std::uint16_t port) const;
  std::uint16_t KernelPick();
  std::uint16_t HandOut(std::uint16_t port);

  std::string bind_host_;
  std::uint16_t end_ = 0;  // the ephemeral range's first port: the window ends before it
  std::mt19937 random_;
  std::set<std::uint16_t> handed_out_;
};

// `spec` with "{host}" replaced by `host`, and "{port}" and "{health_port}" by two fresh ports
// from `ports` (drawn only when the spec names them), in argv and in env values.
LaunchSpec FillHostPlaceholders(LaunchSpec spec, const std::string& host, PortPicker& ports);

}  // namespace drover::rollout
