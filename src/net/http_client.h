// A small blocking HTTP/1.1 client for the CLI, the deploy controller and the demo: one
// connection per request, JSON bodies, bearer token, and a streaming GET that hands each line of
// a chunked body to a callback.
// https:// verifies the server's certificate and host name against the system's trust store,
// or against `ca_file` when given.
// Several servers of one cluster (the registries over one etcd) are given comma-separated:
// a request goes to the one that answered last; when it cannot be connected to, the next is
// tried, so a request moves on only when none of it was sent (safe for any method).
// Not thread-safe; one per thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"

namespace drover::net {

struct HttpResult {
  int status = 0;
  std::string body;
};

class HttpClient {
 public:
  // `base` is "http://host:port" or "https://host:port", or several of them comma-separated;
  // INVALID_ARGUMENT for anything else.
  // `peer` names the server in error messages ("registry at 127.0.0.1:7070: Connection refused").
  static Result<HttpClient> Create(const std::string& base, std::string token,
                                   std::chrono::seconds timeout = std::chrono::seconds(10),
                                   std::string ca_file = {}, std::string peer = "registry");

  // UNAVAILABLE when the server cannot be reached or the exchange fails.
  Result<HttpResult> Send(std::string_view method, const std::string& target,
                          const std::string& body = {}) const;

  // GETs a chunked stream and calls `on_line` for every complete line until it returns false,
  // the server ends the stream, or an error occurs (no timeout while streaming). Returns status
  // 200 (and no body) when the stream ran; a refusal's status and body when the server answered
  // anything else; UNAVAILABLE when it could not be reached or the stream broke.
  Result<HttpResult> Stream(const std::string& target,
                            const std::function<bool(std::string_view)>& on_line) const;

 private:
  struct Server {
    std::string host;
    std::string port;
    bool tls = false;
  };
  HttpClient(std::vector<Server> servers, std::string token, std::chrono::seconds timeout,
             std::string ca_file, std::string peer)
      : servers_(std::move(servers)),
        token_(std::move(token)),
        timeout_(timeout),
        ca_file_(std::move(ca_file)),
        peer_(std::move(peer)) {}

  // Connects to the current server, or the next ones while a connection cannot be made, (and
  // completes the TLS handshake) and calls `use` with the stream and the server.
  template <typename Use>
  Status WithConnection(Use&& use) const;
  template <typename Use>
  Status WithConnectionTo(const Server& server, bool& connected, Use&& use) const;

  std::vector<Server> servers_;
  mutable std::size_t current_ = 0;
  std::string token_;
  std::chrono::seconds timeout_;
  std::string ca_file_;
  std::string peer_;
};

}  // namespace drover::net
