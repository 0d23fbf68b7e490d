// The HTTP gateway's checks of a request head and its hop-by-hop rule, apart from the proxy's
// I/O so that they are unit tested and fuzzed on their own (tests/fuzz/).
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <string>

namespace drover::gateway {

// Why a parsed request head cannot be forwarded (the 400's text), or empty when it can:
// HTTP/1.0 or 1.1 only, an origin-form target, exactly one Host in HTTP/1.1, and a
// Transfer-Encoding that ends in chunked and comes without Content-Length (RFC 9112 6.1/6.3:
// otherwise the framing is ambiguous, the classic request smuggling vector). `chunked` is the
// parser's verdict on the final transfer coding.
std::string CheckRequestHead(const boost::beast::http::request_header<>& req, bool chunked);

// Hop-by-hop fields (RFC 9110 7.6.1) describe one connection, not the message: Connection, the
// fields it names, and the classic list. Transfer-Encoding stays: the serializer frames the body
// by it (re-chunking what arrived chunked).
void DropHopByHop(boost::beast::http::fields& fields);

}  // namespace drover::gateway
