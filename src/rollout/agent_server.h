// AgentServer: the HTTP/JSON API of `drover agent` -- its Platform and its deploy history (RO-1,
// RO-4).
//
//   GET    /live                           200 "live"
//   GET    /v1/instances[?service=S]       {"instances": [instance, ...]}  (events, newest last)
//   POST   /v1/instances                   launch spec {service, id, version, argv, env} -> 200
//                                          (409 ALREADY_EXISTS, 400 INVALID_ARGUMENT)
//   DELETE /v1/instances/{id}[?grace_ms=N] stop (SIGTERM, then SIGKILL after the grace; default
//                                          10000) and forget -> 200 (404 NOT_FOUND)
//   GET    /v1/deploys[?service=S]         {"deploys": [record, ...]} newest first
//   PUT    /v1/deploys/{id}                a deploy record (JSON object with at least "service");
//                                          replaces the record with that id -> 200
//
// GET /live and GET /v1/deploys answer with "Access-Control-Allow-Origin: *": the registry's
// dashboard reads the deploy history from the browser. Nothing else does -- not writes, and not
// /v1/instances, whose launch specs (argv, environment) no other origin should read.
//
// With a token file (common/tokens.h), every /v1 request needs a known bearer token (401, with
// WWW-Authenticate, otherwise), and starting or stopping an instance of service S, or recording
// a deploy of S, needs a token whose `deploy` list names S (403 otherwise; `write` is not
// enough). GET /live stays open for probes. With a certificate and key the API is HTTPS only.
//
// Errors are {"error":{"code","message"}} with the HTTP status of common/http_error.h, as in the
// registry. Deploy records are kept in <data_dir>/deploys.json (the newest 200, rewritten
// atomically and fsynced on every change).
// Served by net::HttpServer: 16 io threads answer requests (a stop holds its thread for up to its
// grace), at most 64 connections at once (more get 503), bodies up to 64 KiB (more: 413).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "rollout/platform.h"

namespace drover {
class Authorizer;
}  // namespace drover

namespace drover::rollout {

struct AgentServerOptions {
  std::string data_dir;                    // where deploys.json is kept
  std::string address = "127.0.0.1:0";     // host:port; port 0: any free port
  std::shared_ptr<const Authorizer> auth;  // null: no authentication
  std::string tls_cert_file;               // both set: HTTPS only
  std::string tls_key_file;
};

class AgentServer {
 public:
  // `platform` must outlive the server. INVALID_ARGUMENT for a bad address or TLS file,
  // UNAVAILABLE when the address cannot be bound, DATA_LOSS for an unreadable deploy history.
  static Result<std::unique_ptr<AgentServer>> Start(Platform& platform, AgentServerOptions options);
  ~AgentServer();  // stops accepting and the io threads, and joins them
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  std::uint16_t port() const;
  bool tls() const;
  // The bound address, "ip:port".
  std::string address() const;

  struct Impl;

 private:
  explicit AgentServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::rollout
