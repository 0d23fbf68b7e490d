// A `drover registry` child process for end-to-end tests: started with the given flags, its
// ports read back from its start-up line ("drover registry listening on http://127.0.0.2:N and
// grpc://127.0.0.2:M [and dns://...] [and xds://...] ..."), so flags may ask for port 0 and bind
// any loopback address.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "testing/child_process.h"
#include "testing/port_in.h"

namespace drover::testing {

struct RegistryProcess {
  std::unique_ptr<ChildProcess> child;
  std::uint16_t http = 0;  // 0: the registry never said where it listens
  std::uint16_t grpc = 0;  // 0 also with --grpc off
  std::uint16_t dns = 0;   // 0 without --dns
  std::uint16_t xds = 0;   // 0 without --xds
  std::string line;        // its start-up line, for failure messages

  std::string grpc_address() const { return "127.0.0.1:" + std::to_string(grpc); }
};

// Runs `binary registry <flags...>` and waits (bounded) for its start-up line.
inline RegistryProcess StartRegistryProcess(const std::string& binary,
                                            const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {binary, "registry"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  RegistryProcess r;
  r.child = std::make_unique<ChildProcess>(argv);
  if (auto line = r.child->ReadLine(std::chrono::seconds(20))) {
    r.line = *line;
    r.http = PortIn(r.line, R"(http://[0-9.]+:(\d+))");
    r.grpc = PortIn(r.line, R"(grpc://[0-9.]+:(\d+))");
    r.dns = PortIn(r.line, R"(dns://[0-9.]+:(\d+))");
    r.xds = PortIn(r.line, R"(xds://[0-9.]+:(\d+))");
  }
  return r;
}

}  // namespace drover::testing
