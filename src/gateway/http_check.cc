#include "gateway/http_check.h"

#include <boost/beast/http.hpp>
#include <string_view>
#include <vector>

namespace drover::gateway {

namespace http = boost::beast::http;

std::string CheckRequestHead(const http::request_header<>& req, bool chunked) {
  const unsigned version = req.version();
  const auto target = req.target();
  if (version != 10 && version != 11) return "HTTP/1.0 or HTTP/1.1 only";
  if (target.empty() || target[0] != '/') return "the target must be a path (origin form)";
  if (version == 11 && req.count(http::field::host) != 1) {
    return "HTTP/1.1 requires exactly one Host header";
  }
  if (req.count(http::field::transfer_encoding) > 0 &&
      (!chunked || req.count(http::field::content_length) > 0)) {
    return "Transfer-Encoding must end in chunked and comes without Content-Length";
  }
  return {};
}

void DropHopByHop(http::fields& fields) {
  std::vector<std::string> named;
  const auto [first, last] = fields.equal_range(http::field::connection);
  for (auto f = first; f != last; ++f) {
    for (const auto& token : http::token_list(f->value())) {
      named.emplace_back(token.data(), token.size());
    }
  }
  for (const std::string& name : named) {
    const http::field f = http::string_to_field(name);
    if (f != http::field::transfer_encoding && f != http::field::content_length &&
        f != http::field::host) {
      fields.erase(name);
    }
  }
  for (const http::field f :
       {http::field::connection, http::field::keep_alive, http::field::proxy_connection,
        http::field::te, http::field::trailer, http::field::upgrade}) {
    fields.erase(f);
  }
}

}  // namespace drover::gateway
