// HTTP/1 heads and bodies as the gateway parses them: in place, a byte at a time, and strictly.
#include "gateway/http1.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace drover::gateway::http1 {
namespace {

TEST(HeadParserTest, ParsesARequestInPlace) {
  const std::string raw =
      "GET /a/b?c=d HTTP/1.1\r\nHost: example\r\nX-Empty:\r\nX-Spaces: \t one two \t\r\n\r\nNEXT";
  HeadParser parser(1024);
  Head head;
  ASSERT_EQ(parser.Request(raw, head), ParseResult::kDone) << parser.error();
  EXPECT_EQ(parser.size(), raw.size() - 4);
  EXPECT_EQ(head.method, "GET");
  EXPECT_EQ(head.target, "/a/b?c=d");
  EXPECT_EQ(head.version, 11u);
  ASSERT_EQ(head.fields.size(), 3u);
  EXPECT_EQ(head.fields[0].name, "Host");
  EXPECT_EQ(head.fields[1].value, "");
  EXPECT_EQ(head.fields[2].value, "one two");
  EXPECT_EQ(head.fields[0].name.data(), raw.data() + 23);  // a view, not a copy
  EXPECT_EQ(head.framing, Framing::kNone);
  EXPECT_TRUE(head.keep_alive);
  ASSERT_NE(head.Find("HOST"), nullptr);
  EXPECT_EQ(head.Find("host")->value, "example");
  EXPECT_EQ(head.Find("x-missing"), nullptr);
}

TEST(HeadParserTest, AHeadArrivingAByteAtATimeIsFoundOnce) {
  const std::string raw = "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\n\r\n";
  HeadParser parser(1024);
  Head head;
  for (std::size_t n = 1; n < raw.size(); ++n) {
    ASSERT_EQ(parser.Request(std::string_view(raw).substr(0, n), head), ParseResult::kNeedMore)
        << n;
  }
  ASSERT_EQ(parser.Request(raw, head), ParseResult::kDone);
  EXPECT_EQ(parser.size(), raw.size());
  EXPECT_EQ(head.framing, Framing::kLength);
  EXPECT_EQ(head.content_length, 12u);
}

TEST(HeadParserTest, KeepAliveFollowsTheVersionAndConnection) {
  struct Case {
    const char* raw;
    bool keep;
  };
  for (const Case& c : std::vector<Case>{
           {"GET / HTTP/1.1\r\nHost: h\r\n\r\n", true},
           {"GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n", false},
           {"GET / HTTP/1.1\r\nHost: h\r\nConnection: x, close\r\n\r\n", false},
           {"GET / HTTP/1.0\r\n\r\n", false},
           {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
           {"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", false},
       }) {
    HeadParser parser(1024);
    Head head;
    ASSERT_EQ(parser.Request(c.raw, head), ParseResult::kDone) << c.raw;
    EXPECT_EQ(head.keep_alive, c.keep) << c.raw;
  }
}

TEST(HeadParserTest, RefusesWhatCouldBeReadTwoWays) {
  const std::vector<std::string> bad = {
      "HELLO THERE\r\n\r\n",
      "GET /\r\n\r\n",
      "GET  / HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.2\r\nHost: x\r\n\r\n",
      "GET / HTTP/2.0\r\n\r\n",
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
      "GET / http/1.1\r\n\r\n",
      "GET / HTTP/1.1 \r\n\r\n",
      "GET /a\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /a\rb HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET / HTTP/1.1\nHost: x\r\n\r\n",
      "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n",
      "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x\r\nJustAName\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x\r\n: novalue\r\n\r\n",
      std::string("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 37),
      "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x7f\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12a\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
      "chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
      "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
  };
  for (const std::string& raw : bad) {
    HeadParser parser(1024);
    Head head;
    EXPECT_EQ(parser.Request(raw, head), ParseResult::kBad) << raw;
    EXPECT_FALSE(parser.error().empty()) << raw;
  }
}

TEST(HeadParserTest, AcceptsChunkedAfterOtherCodingsAndAnyCase) {
  HeadParser parser(1024);
  Head head;
  ASSERT_EQ(parser.Request("POST / HTTP/1.1\r\nHost: x\r\ntransfer-encoding: gzip, CHUNKED\r\n\r\n",
                           head),
            ParseResult::kDone)
      << parser.error();
  EXPECT_EQ(head.framing, Framing::kChunked);
}

TEST(HeadParserTest, AHeadOverTheLimitIsTooLargeWhetherOrNotItEnded) {
  const std::string big = "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'b');
  HeadParser parser(1024);
  Head head;
  EXPECT_EQ(parser.Request(big, head), ParseResult::kTooLarge);
  HeadParser again(1024);
  EXPECT_EQ(again.Request(big + "\r\n\r\n", head), ParseResult::kTooLarge);
  HeadParser exact(36);
  EXPECT_EQ(exact.Request("GET / HTTP/1.1\r\nHost: x\r\nX-A: 12\r\n\r\n", head),
            ParseResult::kDone);
  HeadParser one_less(35);
  EXPECT_EQ(one_less.Request("GET / HTTP/1.1\r\nHost: x\r\nX-A: 12\r\n\r\n", head),
            ParseResult::kTooLarge);
}

TEST(HeadParserTest, ResponsesAreFramedByStatusCodingsLengthOrTheClose) {
  struct Case {
    const char* raw;
    bool to_head;
    Framing framing;
    std::uint64_t length;
    bool keep;
  };
  for (const Case& c : std::vector<Case>{
           {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", false, Framing::kLength, 3, true},
           {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", true, Framing::kNone, 0, true},
           {"HTTP/1.1 204 No Content\r\n\r\n", false, Framing::kNone, 0, true},
           {"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", false, Framing::kNone, 0,
            true},
           {"HTTP/1.1 100 Continue\r\n\r\n", false, Framing::kNone, 0, true},
           // Both framings: the coding wins, and the connection is not used again.
           {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", false,
            Framing::kChunked, 0, false},
           {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, Framing::kChunked, 0,
            true},
           {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false, Framing::kClose, 0, false},
           {"HTTP/1.1 200 OK\r\n\r\n", false, Framing::kClose, 0, false},
           {"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false, Framing::kLength, 1, false},
           {"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n", false,
            Framing::kLength, 1, true},
           {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n", false,
            Framing::kLength, 1, false},
           {"HTTP/1.1 599\r\nContent-Length: 0\r\n\r\n", false, Framing::kLength, 0, true},
       }) {
    HeadParser parser(1024);
    Head head;
    ASSERT_EQ(parser.Response(c.raw, c.to_head, head), ParseResult::kDone)
        << c.raw << ": " << parser.error();
    EXPECT_EQ(head.framing, c.framing) << c.raw;
    EXPECT_EQ(head.content_length, c.length) << c.raw;
    EXPECT_EQ(head.keep_alive, c.keep) << c.raw;
  }
  HeadParser parser(1024);
  Head head;
  ASSERT_EQ(parser.Response("HTTP/1.1 404 Not Found Here\r\n\r\n", false, head),
            ParseResult::kDone);
  EXPECT_EQ(head.status, 404u);
  EXPECT_EQ(head.reason, "Not Found Here");
}

TEST(HeadParserTest, RefusesBrokenResponses) {
  for (const char* raw : {
           "HTTP/1.1 20 OK\r\n\r\n",
           "HTTP/1.1 2000 OK\r\n\r\n",
           "HTTP/1.1 099 Low\r\n\r\n",
           "HTTP/2.0 200 OK\r\n\r\n",
           "ICY 200 OK\r\n\r\n",
           "HTTP/1.1 200 OK\x01\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
           "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
       }) {
    HeadParser parser(1024);
    Head head;
    EXPECT_EQ(parser.Response(raw, false, head), ParseResult::kBad) << raw;
  }
}

TEST(HeadParserTest, ResetReadsTheNextHead) {
  const std::string raw =
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
  HeadParser parser(1024);
  Head head;
  ASSERT_EQ(parser.Response(raw, false, head), ParseResult::kDone);
  EXPECT_EQ(head.status, 100u);
  const std::string_view rest = std::string_view(raw).substr(parser.size());
  parser.Reset();
  ASSERT_EQ(parser.Response(rest, false, head), ParseResult::kDone);
  EXPECT_EQ(head.status, 200u);
  EXPECT_EQ(parser.size(), rest.size());
}

// Decodes `input` handed over `piece` bytes at a time (the rest kept for the next call, as a
// connection's buffer keeps what was not taken); returns the payload, or "BAD: why".
std::string Decode(BodyDecoder& d, const std::string& input, std::size_t piece,
                   std::size_t* left = nullptr) {
  std::string payload;
  std::string pending;
  std::size_t at = 0;
  while (!d.done() && !d.bad()) {
    if (at < input.size()) {
      pending += input.substr(at, piece);
      at += piece;
    }
    std::string_view view = pending;
    while (!d.done() && !d.bad()) {
      const BodyDecoder::Step step = d.Next(view);
      payload.append(step.data);
      view.remove_prefix(step.used);
      if (step.used == 0) break;
    }
    pending = std::string(view);
    if (at >= input.size() && !d.done() && !d.bad()) break;
  }
  if (left != nullptr) *left = pending.size() + (at < input.size() ? input.size() - at : 0);
  if (d.bad()) return "BAD: " + std::string(d.error());
  return payload;
}

TEST(BodyDecoderTest, ContentLengthStopsAtItsEnd) {
  for (const std::size_t piece : {1u, 3u, 100u}) {
    BodyDecoder d;
    d.Start(Framing::kLength, 5);
    std::size_t left = 0;
    EXPECT_EQ(Decode(d, "helloGET /next", piece, &left), "hello");
    EXPECT_TRUE(d.done());
    EXPECT_EQ(left, 9u) << piece;
  }
  BodyDecoder empty;
  empty.Start(Framing::kLength, 0);
  EXPECT_TRUE(empty.done());
  BodyDecoder none;
  none.Start(Framing::kNone, 0);
  EXPECT_TRUE(none.done());
  EXPECT_EQ(none.Next("x").used, 0u);
}

TEST(BodyDecoderTest, ChunkedAtAnySplitWithExtensionsAndTrailers) {
  const std::string body =
      "5;name=value\r\nhello\r\n1A \t; x\r\nabcdefghijklmnopqrstuvwxyz\r\n"
      "0\r\nX-Sum: 1\r\nX-Other: two\r\n\r\nNEXT";
  for (std::size_t piece = 1; piece <= body.size(); ++piece) {
    BodyDecoder d;
    d.Start(Framing::kChunked, 0);
    std::size_t left = 0;
    EXPECT_EQ(Decode(d, body, piece, &left), "helloabcdefghijklmnopqrstuvwxyz") << piece;
    EXPECT_TRUE(d.done()) << piece;
    EXPECT_EQ(left, 4u) << piece;
  }
  BodyDecoder upper;
  upper.Start(Framing::kChunked, 0);
  EXPECT_EQ(Decode(upper, "A\r\n0123456789\r\n0\r\n\r\n", 64), "0123456789");
}

TEST(BodyDecoderTest, ChunkedRefusesBrokenFraming) {
  for (const char* raw : {
           "ZZ\r\nhi\r\n0\r\n\r\n",
           "\r\nhi\r\n0\r\n\r\n",
           "2\nhi\r\n0\r\n\r\n",
           "2\r\nhiX\r\n0\r\n\r\n",
           "2\r\nhi\rX0\r\n\r\n",
           "-2\r\nhi\r\n0\r\n\r\n",
           "2 x\r\nhi\r\n0\r\n\r\n",
           "2;a\x01\r\nhi\r\n0\r\n\r\n",
           "11111111111111111\r\n",
           "0\r\nX: a\x01\r\n\r\n",
           "0\r\nX: a\r\r\n",
           "0\r\n\rX",
       }) {
    BodyDecoder d;
    d.Start(Framing::kChunked, 0);
    EXPECT_EQ(Decode(d, raw, 64).substr(0, 4), "BAD:") << raw;
  }
  // A 16-digit size is the largest.
  BodyDecoder big;
  big.Start(Framing::kChunked, 0);
  const BodyDecoder::Step step = big.Next("ffffffffffffffff\r\nab");
  EXPECT_FALSE(big.bad());
  EXPECT_EQ(step.data, "ab");
}

TEST(BodyDecoderTest, TheCloseEndsOnlyABodyItFrames) {
  BodyDecoder close;
  close.Start(Framing::kClose, 0);
  const BodyDecoder::Step step = close.Next("anything\r\n0\r\n");
  EXPECT_EQ(step.data, "anything\r\n0\r\n");
  EXPECT_FALSE(close.done());
  EXPECT_TRUE(close.End());
  EXPECT_TRUE(close.done());
  BodyDecoder length;
  length.Start(Framing::kLength, 10);
  (void)length.Next("short");
  EXPECT_FALSE(length.End());
  BodyDecoder chunked;
  chunked.Start(Framing::kChunked, 0);
  (void)chunked.Next("5\r\nab");
  EXPECT_FALSE(chunked.End());
}

TEST(ChunkHeaderTest, HexSizeAndCrlf) {
  char buffer[18];
  EXPECT_EQ(AppendChunkHeader(1, buffer), "1\r\n");
  EXPECT_EQ(AppendChunkHeader(65536, buffer), "10000\r\n");
  EXPECT_EQ(AppendChunkHeader(0xabcdef, buffer), "abcdef\r\n");
  EXPECT_EQ(AppendChunkHeader(~std::uint64_t{0}, buffer), "ffffffffffffffff\r\n");
}

}  // namespace
}  // namespace drover::gateway::http1
