// The request-head checks and the hop-by-hop header removal, on hand-made heads.
#include "gateway/http_check.h"

#include <gtest/gtest.h>

#include <boost/beast/http.hpp>
#include <string>
#include <vector>

namespace drover::gateway {
namespace {

namespace http = boost::beast::http;

std::vector<std::string> Names(const http::fields& fields) {
  std::vector<std::string> names;
  for (const auto& f : fields) names.emplace_back(f.name_string());
  return names;
}

TEST(DropHopByHopTest, DropsTheFixedSetAndWhatConnectionNames) {
  http::fields f;
  f.insert("Host", "example");
  f.insert(http::field::connection, "keep-alive, X-Trace");
  f.insert("Keep-Alive", "timeout=5");
  f.insert("X-Trace", "1");
  f.insert("TE", "trailers");
  f.insert("Upgrade", "h2c");
  f.insert("Proxy-Connection", "keep-alive");
  f.insert("Trailer", "X-Sum");
  f.insert("X-Kept", "yes");
  DropHopByHop(f);
  EXPECT_EQ(Names(f), (std::vector<std::string>{"Host", "X-Kept"}));
}

TEST(DropHopByHopTest, AFieldRightAfterTheConnectionFieldsIsDroppedSafely) {
  // The named field sits next to the Connection group in the list: erasing it must not disturb
  // the walk over several Connection fields.
  http::fields f;
  f.insert(http::field::connection, "X-A");
  f.insert(http::field::connection, "X-B, connection");
  f.insert("X-A", "1");
  f.insert("X-B", "2");
  f.insert("X-C", "3");
  DropHopByHop(f);
  EXPECT_EQ(Names(f), (std::vector<std::string>{"X-C"}));
}

TEST(DropHopByHopTest, NeverDropsFramingOrHostEvenWhenNamed) {
  http::fields f;
  f.insert("Host", "example");
  f.insert("Content-Length", "3");
  f.insert(http::field::connection, "Host, Content-Length, Transfer-Encoding");
  DropHopByHop(f);
  EXPECT_EQ(Names(f), (std::vector<std::string>{"Host", "Content-Length"}));
}

TEST(CheckRequestHeadTest, NamesWhatIsWrong) {
  http::request_header<> req;
  req.version(11);
  req.target("/a");
  EXPECT_EQ(CheckRequestHead(req, false), "HTTP/1.1 requires exactly one Host header");
  req.set(http::field::host, "h");
  EXPECT_EQ(CheckRequestHead(req, false), "");
  req.target("http://h/a");
  EXPECT_EQ(CheckRequestHead(req, false), "the target must be a path (origin form)");
  req.target("/a");
  req.set(http::field::transfer_encoding, "gzip");
  EXPECT_EQ(CheckRequestHead(req, false),
            "Transfer-Encoding must end in chunked and comes without Content-Length");
}

}  // namespace
}  // namespace drover::gateway
