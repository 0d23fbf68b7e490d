// The request-head checks, the hop-by-hop rule and the heads the gateway writes, on parsed heads.
#include "gateway/http_check.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

namespace drover::gateway {
namespace {

using http1::Framing;
using http1::Head;
using http1::HeadParser;
using http1::ParseResult;

// The inputs of the heads parsed here: a head's names and values are views into them.
const std::string& Keep(std::string raw) {
  static std::deque<std::string> kept;
  return kept.emplace_back(std::move(raw));
}

Head Request(std::string raw) {
  Head head;
  HeadParser parser(16 * 1024);
  EXPECT_EQ(parser.Request(Keep(std::move(raw)), head), ParseResult::kDone) << parser.error();
  return head;
}

Head Response(std::string raw, bool to_head = false) {
  Head head;
  HeadParser parser(16 * 1024);
  EXPECT_EQ(parser.Response(Keep(std::move(raw)), to_head, head), ParseResult::kDone)
      << parser.error();
  return head;
}

std::vector<std::string> Kept(const Head& head) {
  std::vector<std::string> names;
  for (const http1::Field& f : head.fields) {
    if (!IsHopByHop(head, f.name)) names.emplace_back(f.name);
  }
  return names;
}

TEST(HopByHopTest, DropsTheFixedSetAndWhatConnectionNames) {
  const std::string raw =
      "GET / HTTP/1.1\r\nHost: example\r\nConnection: keep-alive, X-Trace\r\n"
      "Keep-Alive: timeout=5\r\nX-Trace: 1\r\nTE: trailers\r\nUpgrade: h2c\r\n"
      "Proxy-Connection: keep-alive\r\nTrailer: X-Sum\r\nX-Kept: yes\r\n\r\n";
  EXPECT_EQ(Kept(Request(raw)), (std::vector<std::string>{"Host", "X-Kept"}));
}

TEST(HopByHopTest, SeveralConnectionFieldsAllCount) {
  const std::string raw =
      "GET / HTTP/1.1\r\nHost: h\r\nConnection: X-A\r\nconnection: X-B, connection\r\n"
      "X-A: 1\r\nx-b: 2\r\nX-C: 3\r\n\r\n";
  EXPECT_EQ(Kept(Request(raw)), (std::vector<std::string>{"Host", "X-C"}));
}

TEST(HopByHopTest, NeverDropsFramingOrHostEvenWhenNamed) {
  const std::string raw =
      "POST / HTTP/1.1\r\nHost: example\r\nContent-Length: 3\r\n"
      "Connection: Host, Content-Length, Transfer-Encoding\r\n\r\n";
  EXPECT_EQ(Kept(Request(raw)), (std::vector<std::string>{"Host", "Content-Length"}));
}

TEST(CheckRequestHeadTest, NamesWhatIsWrong) {
  EXPECT_EQ(CheckRequestHead(Request("GET /a HTTP/1.1\r\n\r\n")),
            "HTTP/1.1 requires exactly one Host header");
  EXPECT_EQ(CheckRequestHead(Request("GET /a HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n")),
            "HTTP/1.1 requires exactly one Host header");
  EXPECT_EQ(CheckRequestHead(Request("GET /a HTTP/1.1\r\nHost: h\r\n\r\n")), "");
  EXPECT_EQ(CheckRequestHead(Request("GET /a HTTP/1.0\r\n\r\n")), "");  // 1.0 needs no Host
  EXPECT_EQ(CheckRequestHead(Request("GET /a HTTP/1.0\r\nHost: a\r\n\r\n")), "");
  EXPECT_EQ(CheckRequestHead(Request("GET /a HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n")),
            "more than one Host header");
  EXPECT_EQ(CheckRequestHead(Request("GET http://h/a HTTP/1.1\r\nHost: h\r\n\r\n")),
            "the target must be a path (origin form)");
  EXPECT_EQ(CheckRequestHead(Request("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n")),
            "the target must be a path (origin form)");
}

TEST(WriteRequestHeadTest, HttpOneOneWithoutHopByHopAndExpectAndOneForwardedForLast) {
  const Head req = Request(
      "PUT /a?b=1 HTTP/1.0\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1\r\nConnection: keep-alive, "
      "X-Secret\r\nX-Secret: s\r\nExpect: 100-continue\r\nContent-Length: 2\r\n"
      "x-forwarded-for: 10.0.0.2, 10.0.0.3\r\nX-Kept:  yes \r\n\r\n");
  std::string out = "stale";
  WriteRequestHead(req, "127.0.0.9", out);
  EXPECT_EQ(out,
            "PUT /a?b=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nX-Kept: yes\r\n"
            "X-Forwarded-For: 10.0.0.1, 10.0.0.2, 10.0.0.3, 127.0.0.9\r\n\r\n");
  WriteRequestHead(Request("GET / HTTP/1.1\r\nHost: h\r\n\r\n"), "::1", out);
  EXPECT_EQ(out, "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: ::1\r\n\r\n");
}

TEST(WriteResponseHeadTest, KeepsTheFramingAndSpellsKeepAliveForTheClientsVersion) {
  const Head res =
      Response("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nKeep-Alive: timeout=5\r\nX-A: 1\r\n\r\n");
  EXPECT_EQ(ClientFraming(res, 11), Framing::kLength);
  std::string out;
  WriteResponseHead(res, 11, Framing::kLength, true, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\n\r\n");
  WriteResponseHead(res, 11, Framing::kLength, false, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\nConnection: close\r\n\r\n");
  WriteResponseHead(res, 10, Framing::kLength, true, out);
  EXPECT_EQ(out,
            "HTTP/1.0 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\nConnection: keep-alive\r\n\r\n");
  WriteResponseHead(res, 10, Framing::kLength, false, out);
  EXPECT_EQ(out, "HTTP/1.0 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\n\r\n");
  // An empty reason stays empty.
  WriteResponseHead(Response("HTTP/1.1 204 \r\n\r\n"), 11, Framing::kNone, true, out);
  EXPECT_EQ(out, "HTTP/1.1 204 \r\n\r\n");
}

TEST(WriteResponseHeadTest, ABodyFramedByTheCloseGoesChunkedToHttpOneOne) {
  const Head res = Response("HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\n");
  ASSERT_EQ(res.framing, Framing::kClose);
  EXPECT_FALSE(res.keep_alive);
  EXPECT_EQ(ClientFraming(res, 11), Framing::kChunked);
  EXPECT_EQ(ClientFraming(res, 10), Framing::kClose);
  std::string out;
  WriteResponseHead(res, 11, Framing::kChunked, true, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\n\r\n");
  // Codings of its own: chunked goes last.
  const Head gzip = Response("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");
  ASSERT_EQ(gzip.framing, Framing::kClose);
  WriteResponseHead(gzip, 11, Framing::kChunked, true, out);
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n");
}

TEST(WriteResponseHeadTest, AChunkedBodyGoesToHttpOneZeroFramedByTheCloseWithoutLength) {
  const Head res = Response(
      "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n");
  ASSERT_EQ(res.framing, Framing::kChunked);
  EXPECT_EQ(ClientFraming(res, 10), Framing::kClose);
  std::string out;
  WriteResponseHead(res, 10, Framing::kClose, false, out);
  EXPECT_EQ(out, "HTTP/1.0 200 OK\r\nX-A: 1\r\n\r\n");
  WriteResponseHead(res, 11, Framing::kChunked, true, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n");
}

TEST(WriteResponseHeadTest, HttpOneZeroClientsAreSentNoTransferEncodingWhateverTheBody) {
  std::string out;
  // Codings other than chunked, framed by the close.
  const Head gzip = Response("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nX-A: 1\r\n\r\n");
  ASSERT_EQ(ClientFraming(gzip, 10), Framing::kClose);
  WriteResponseHead(gzip, 10, Framing::kClose, false, out);
  EXPECT_EQ(out, "HTTP/1.0 200 OK\r\nX-A: 1\r\n\r\n");
  // No body (the answer to a HEAD): the coding it would have had is not named to HTTP/1.0 ...
  const Head head = Response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true);
  ASSERT_EQ(head.framing, Framing::kNone);
  WriteResponseHead(head, 10, ClientFraming(head, 10), true, out);
  EXPECT_EQ(out, "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n");
  // ... and is to HTTP/1.1.
  WriteResponseHead(head, 11, ClientFraming(head, 11), true, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
}

}  // namespace
}  // namespace drover::gateway
