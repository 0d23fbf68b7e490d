// DnsServer: the registry's DNS listener (`drover registry --dns host:port`), answering the
// names of dns_answer.h from the registry's current state, on UDP and on TCP at the same port.
//
// One io thread of its own serves both: a UDP socket that answers each datagram as it reads it,
// and a TcpListener (the shared accept loop) whose connections each run one coroutine reading
// length-prefixed queries (RFC 1035 4.2.2; several per connection, answered in order) until the
// client closes, 10 s pass idle, or the server stops. Answers read the registry through
// Registry::List, which takes only its read lock: DNS never waits on a write's commit.
//
// Thread-safety: Start() and the getters from any thread; Stop() (idempotent) from any thread
// but the server's own. The Registry and the Clock must outlive the server.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "drover/clock.h"
#include "drover/status.h"
#include "registry/dns_answer.h"

namespace drover::registry {

class Registry;

// What the server has answered since it started.
struct DnsCounters {
  std::atomic<std::uint64_t> udp_queries{0};
  std::atomic<std::uint64_t> tcp_queries{0};
  std::atomic<std::uint64_t> nxdomain{0};
  std::atomic<std::uint64_t> refused{0};    // REFUSED and NOTIMP
  std::atomic<std::uint64_t> malformed{0};  // FORMERR, and messages too short to answer
  std::atomic<std::uint64_t> truncated{0};
};

struct DnsOptions {
  std::string address;  // "ip:port"; port 0: any free port (the same one for UDP and TCP)
  DnsZone zone;
  std::size_t max_tcp_connections = 256;
  // Where the server counts what it answers (the registry's /metrics reads them); null: its own.
  std::shared_ptr<DnsCounters> counters;
};

class DnsServer {
 public:
  // Binds UDP and TCP on options.address and starts serving. INVALID_ARGUMENT for a bad address
  // or zone; UNAVAILABLE when the port cannot be bound.
  static Result<std::unique_ptr<DnsServer>> Start(const Registry& registry, DnsOptions options,
                                                  Clock& clock);
  ~DnsServer();  // Stop()
  DnsServer(const DnsServer&) = delete;
  DnsServer& operator=(const DnsServer&) = delete;

  std::uint16_t port() const;
  const DnsCounters& counters() const;
  // Closes both sockets and every TCP connection, and joins the io thread.
  void Stop();

  struct Impl;

 private:
  explicit DnsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::registry
