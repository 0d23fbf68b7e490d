#include "gateway/http_check.h"

#include <boost/beast/http.hpp>
#include <string_view>

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
  // The names a Connection header lists go first, straight from its value. Same-named fields are
  // adjacent in the list, and the erased ones are never Connection fields, so `f` stays valid.
  for (auto f = fields.find(http::field::connection);
       f != fields.end() && f->name() == http::field::connection; ++f) {
    for (const auto& token : http::token_list(f->value())) {
      const http::field named = http::string_to_field(token);
      if (named != http::field::transfer_encoding && named != http::field::content_length &&
          named != http::field::host && named != http::field::connection) {
        fields.erase(token);
      }
    }
  }
  for (const http::field f :
       {http::field::connection, http::field::keep_alive, http::field::proxy_connection,
        http::field::te, http::field::trailer, http::field::upgrade}) {
    fields.erase(f);
  }
}

}  // namespace drover::gateway
