// The server side of TLS, written once for every Drover server: a context that speaks TLS 1.2
// and later with the given PEM certificate chain and private key, and (for HTTP/2) the ALPN
// protocol it insists on.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <string>

#include "drover/status.h"

namespace drover::net {

// Loads `cert_file` and `key_file` into `ctx` (made with ssl::context::tls_server): both needed;
// INVALID_ARGUMENT naming the file that cannot be read or used.
Status LoadServerTls(boost::asio::ssl::context& ctx, const std::string& cert_file,
                     const std::string& key_file);

// Has `ctx` select ALPN protocol "h2" and refuse a handshake whose client does not offer it
// (gRPC's clients require h2 by ALPN over TLS).
void RequireAlpnH2(boost::asio::ssl::context& ctx);

}  // namespace drover::net
