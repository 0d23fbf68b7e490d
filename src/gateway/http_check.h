// The HTTP gateway's rules for what it forwards, apart from the proxy's I/O so that they are unit
// tested and fuzzed on their own (tests/fuzz/): the checks a parsed request head must pass, the
// hop-by-hop rule, and the heads it writes upstream and back to the client.
#pragma once

#include <string>
#include <string_view>

#include "gateway/http1.h"

namespace drover::gateway {

// Why a parsed request head cannot be forwarded (the 400's text), or empty when it can: an
// origin-form target and exactly one Host in HTTP/1.1. (The parser has checked the version and
// that the framing is unambiguous: a Transfer-Encoding that ends in chunked and comes without a
// Content-Length, RFC 9112 6.1/6.3, the classic request smuggling vector.)
std::string_view CheckRequestHead(const http1::Head& req);

// Hop-by-hop fields (RFC 9110 7.6.1) describe one connection, not the message: Connection, the
// fields it names, and the classic list (Keep-Alive, Proxy-Connection, TE, Trailer, Upgrade).
// Transfer-Encoding, Content-Length and Host are the message's even when a Connection names them.
bool IsHopByHop(const http1::Head& head, std::string_view name);

// The head sent upstream for `req` into `out` (replacing what it held): HTTP/1.1 (so keep-alive
// with no Connection field), the client's fields in order without the hop-by-hop ones and
// without Expect (the gateway answers 100-continue itself), and one X-Forwarded-For last: the
// client's values, then `client_ip`.
void WriteRequestHead(const http1::Head& req, std::string_view client_ip, std::string& out);

// How the gateway frames a response body for its client: as the upstream did, except that a
// body framed by the close goes chunked to an HTTP/1.1 client (so its connection can stay), and a
// chunked one goes framed by the close to an HTTP/1.0 client (which knows no chunks).
http1::Framing ClientFraming(const http1::Head& res, unsigned client_version);

// The head sent to the client for `res` into `out`: the client's HTTP version, the status and
// reason, the fields without the hop-by-hop ones, framed as `framing` (ClientFraming) says --
// Transfer-Encoding: chunked added or dropped to match, a Content-Length dropped beside a
// Transfer-Encoding -- and `keep_alive` spelled for that version (HTTP/1.1: "Connection: close"
// when not; HTTP/1.0: "Connection: keep-alive" when so).
void WriteResponseHead(const http1::Head& res, unsigned client_version, http1::Framing framing,
                       bool keep_alive, std::string& out);

}  // namespace drover::gateway
