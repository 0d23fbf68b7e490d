// The processes `drover demo` runs: a registry, three agents and a gateway, each a child running
// this same binary, with their logs in the demo's data directory. Each agent is a "host" on its
// own loopback address (127.0.0.2, 127.0.0.3, 127.0.0.4), registered in the registry as service
// drover-agent; the agents run the sample servers (`drover sample zone|whoami`) the demo deploys,
// which bind and advertise their host's address.
//
// Every child is started by common/child_process.h: its own process group, so Ctrl-C in the
// terminal reaches the demo alone and the demo stops its children in order (Stop): the gateway,
// then the agents -- which stop their instances, each leaving discovery before it closes -- and
// the registry last. Each child also gets SIGTERM from the kernel if the demo itself dies (tied to
// the thread that started it: Start and Stop run on the demo's main thread).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::demo {

class Child {
 public:
  // Runs argv (argv[0] a path) with stdout and stderr appended to `log`.
  static Result<Child> Spawn(std::string name, const std::vector<std::string>& argv,
                             const std::string& log);
  Child(Child&& other) noexcept;
  Child& operator=(Child&&) = delete;
  Child(const Child&) = delete;
  ~Child();  // SIGKILL and reap, if still running

  const std::string& name() const { return name_; }
  const std::string& log() const { return log_; }
  // Empty while it runs; otherwise how it ended (DescribeWaitStatus).
  std::string Ended();
  // SIGTERM, up to `grace` for it to exit, then SIGKILL. Returns how it ended.
  std::string Stop(Duration grace);

 private:
  Child(std::string name, std::string log, pid_t pid)
      : name_(std::move(name)), log_(std::move(log)), pid_(pid) {}

  std::string name_;
  std::string log_;
  pid_t pid_ = -1;
  std::string ended_;
};

struct FleetOptions {
  std::string exe;            // this binary
  std::string data_dir;       // registry/, agent-<host>/, logs/ and gateway.yaml go here
  std::uint16_t ui_port = 0;  // the registry's HTTP port (the dashboard); 0: any free port
  Duration slow_start = std::chrono::seconds(5);
};

class Fleet {
 public:
  // The hosts the agents stand for.
  static const std::vector<std::string>& HostAddresses();

  // Starts the daemons and waits (bounded) until each answers /live.
  static Result<std::unique_ptr<Fleet>> Start(const FleetOptions& options);
  ~Fleet();  // Stop()

  // Stops the gateway, then the agents (and so every instance they run), then the registry.
  // Returns one line per child saying how it ended.
  std::vector<std::string> Stop();
  // UNAVAILABLE naming the first child that is no longer running, and its log.
  Status Check();

  std::string registry_url() const;             // http://127.0.0.1:P (API and /ui/)
  std::string registry_grpc() const;            // 127.0.0.1:P
  std::vector<std::string> agent_urls() const;  // http://127.0.0.2:P, ... in host order
  std::string gateway_admin_url() const;
  std::string zone_address() const;    // the gateway's TCP listener for service "zone"
  std::string whoami_address() const;  // the gateway's TCP listener for service "whoami" (L4)
  // The gateway's key-routed TCP listener for service "shard" (hash: Maglev, hot keys spread,
  // staged migration).
  std::string shard_address() const;
  const FleetOptions& options() const { return options_; }

 private:
  explicit Fleet(FleetOptions options) : options_(std::move(options)) {}

  FleetOptions options_;
  std::uint16_t registry_http_ = 0, registry_grpc_ = 0, gateway_admin_ = 0, zone_ = 0, whoami_ = 0,
                shard_ = 0;
  std::vector<std::uint16_t> agents_;  // one per host address
  std::vector<Child> children_;        // in start order
};

}  // namespace drover::demo
