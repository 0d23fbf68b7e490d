// A small blocking HTTP/1.1 client for the CLI, the deploy controller and the demo: one
// connection per request, JSON bodies, bearer token, and a streaming GET that hands each line of
// a chunked body to a callback.
// https:// verifies the server's certificate and host name against the system's trust store,
// or against `ca_file` when given.
// Not thread-safe; one per thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover::net {

struct HttpResult {
  int status = 0;
  std::string body;
};

class HttpClient {
 public:
  // `base` is "http://host:port" or "https://host:port"; INVALID_ARGUMENT for anything else.
  // `peer` names the server in error messages ("registry at 127.0.0.1:7070: Connection refused").
  static Result<HttpClient> Create(const std::string& base, std::string token,
                                   std::chrono::seconds timeout = std::chrono::seconds(10),
                                   std::string ca_file = {}, std::string peer = "registry");

  // UNAVAILABLE when the server cannot be reached or the exchange fails.
  Result<HttpResult> Send(std::string_view method, const std::string& target,
                          const std::string& body = {}) const;

  // GETs a chunked stream and calls `on_line` for every complete line until it returns false,
  // the server ends the stream, or an error occurs (no timeout while streaming).
  Status Stream(const std::string& target,
                const std::function<bool(std::string_view)>& on_line) const;

 private:
  HttpClient(std::string host, std::string port, std::string token, std::chrono::seconds timeout,
             bool tls, std::string ca_file, std::string peer)
      : host_(std::move(host)),
        port_(std::move(port)),
        token_(std::move(token)),
        timeout_(timeout),
        tls_(tls),
        ca_file_(std::move(ca_file)),
        peer_(std::move(peer)) {}

  // Connects (and completes the TLS handshake) and calls `use` with the stream.
  template <typename Use>
  Status WithConnection(Use&& use) const;

  std::string host_;
  std::string port_;
  std::string token_;
  std::chrono::seconds timeout_;
  bool tls_ = false;
  std::string ca_file_;
  std::string peer_;
};

}  // namespace drover::net
