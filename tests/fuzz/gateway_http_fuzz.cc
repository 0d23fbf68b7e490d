// The HTTP gateway's parsing of what clients and upstreams send: a request head through Beast's
// parser with the gateway's limits, then the gateway's own checks and hop-by-hop rule; the same
// bytes as a response head. Malformed input must be refused (the proxy answers 400), never
// crash it.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>

#include "gateway/http_check.h"

namespace {

namespace http = boost::beast::http;

template <bool isRequest>
bool ParseHead(http::parser<isRequest, http::buffer_body>& parser, const std::uint8_t* data,
               std::size_t size) {
  parser.header_limit(16 * 1024);
  parser.eager(false);
  boost::beast::error_code ec;
  std::size_t used = 0;
  while (used < size && !parser.is_header_done()) {
    const std::size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == http::error::need_more) break;
    if (ec) return false;
    if (n == 0) break;
    used += n;
  }
  return parser.is_header_done();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    http::request_parser<http::buffer_body> parser;
    if (ParseHead(parser, data, size)) {
      auto& req = parser.get();
      (void)drover::gateway::CheckRequestHead(req.base(), parser.chunked());
      drover::gateway::DropHopByHop(req.base());
      for (const auto& field : req.base()) (void)field.value();
    }
  }
  {
    http::response_parser<http::buffer_body> parser;
    if (ParseHead(parser, data, size)) drover::gateway::DropHopByHop(parser.get().base());
  }
  return 0;
}
