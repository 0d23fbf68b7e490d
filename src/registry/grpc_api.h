// The registry's gRPC API (REG-6): drover.registry.v1.Registry from
// proto/drover/registry/v1/registry.proto, with the HTTP API's semantics. Status codes are the
// registry's own (they share gRPC's numbering): ABORTED "fenced: ..." for a stale generation,
// NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION, UNAUTHENTICATED, PERMISSION_DENIED,
// UNAVAILABLE. With `auth` set, every call needs "authorization: Bearer <token>" metadata and
// writes a token allowed to write the service.
//
// Served by net::GrpcServer (HTTP/2 from libnghttp2), one io thread per core: every call is
// handled on its connection's thread -- memory-only work inline; a write is queued to the
// registry, which answers the call once it is committed; Watch and KeepAlive are
// streams on the same threads (no thread per stream). Stop() ends watches with UNAVAILABLE and
// KeepAlive streams with CANCELLED, then drains the connections.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "drover/status.h"

namespace drover {
class Authorizer;
}  // namespace drover

namespace drover::registry {

class ClientLimits;
class Registry;

struct GrpcOptions {
  std::string address = "127.0.0.1:0";  // port 0: any free port; read it back with port()
  std::shared_ptr<const Authorizer> auth;
  // Per-client limits (client_limits.h): Watch streams per client address over the limit, and
  // writes (Register, Heartbeat, SetState, Deregister; a KeepAlive message counts as one write)
  // over the rate, are RESOURCE_EXHAUSTED. Null: ClientLimitOptions' defaults.
  std::shared_ptr<ClientLimits> limits;
  // Connections open at once (past it a client's connection is closed at once). As good as
  // none by default: every process of a fleet holds one, and --max-connections is the HTTP API's.
  std::size_t max_connections = 1'000'000;
  // Both set: TLS only, with this PEM certificate chain and private key.
  std::string tls_cert_file;
  std::string tls_key_file;
};

class GrpcServer {
 public:
  // The Registry must outlive the server.
  static Result<std::unique_ptr<GrpcServer>> Start(Registry& registry, GrpcOptions options);
  ~GrpcServer();

  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const;
  // Ends every watch, stops accepting calls and waits for running ones. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit GrpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::registry
