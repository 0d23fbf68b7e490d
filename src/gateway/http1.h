// HTTP/1.x messages as the gateway's HTTP proxy moves them (RFC 9112), cut to its hot path:
//   - HeadParser parses a request or response head in place: the method, target, reason, field
//     names and values are views into the bytes read, kept in a Head whose field vector is reused
//     from one message to the next, so a head costs no allocation;
//   - BodyDecoder takes a body apart as it arrives (Content-Length, chunked, or up to the close)
//     and hands the payload out as views into the input, the chunk framing and trailers dropped;
//   - AppendChunkHeader and the k* strings frame a payload chunked again.
// Writing a head is the caller's: it is a string built from a parsed one by the proxy's rules
// (http_check.h). The parser is strict where leniency has been a smuggling vector: CRLF line
// ends, no whitespace before a field's colon, no folded lines, one Content-Length made of digits,
// a Transfer-Encoding that ends in chunked exactly once, no control bytes anywhere.
//
// Plain values, no I/O, no locks: one object per connection at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/text.h"

namespace drover::gateway::http1 {

struct Field {
  std::string_view name;
  std::string_view value;  // without the whitespace around it
};

// How a message's body is delimited (RFC 9112 6.3).
enum class Framing : std::uint8_t {
  kNone,     // no body
  kLength,   // Content-Length bytes
  kChunked,  // the chunked transfer coding, applied last
  kClose,    // everything up to the connection's close (responses only)
};

// A parsed head. Its views point into the input it was parsed from and are valid while that
// input is; Clear() keeps the field vector's storage.
struct Head {
  std::string_view method;    // requests
  std::string_view target;    // requests
  unsigned status = 0;        // responses: 100..999
  std::string_view reason;    // responses; may be empty
  unsigned version = 11;      // 10 (HTTP/1.0) or 11 (HTTP/1.1)
  std::vector<Field> fields;  // as received, in order

  Framing framing = Framing::kNone;
  std::uint64_t content_length = 0;  // with kLength
  // The sender's wish to keep the connection: HTTP/1.1 unless `Connection: close`, HTTP/1.0
  // only with `Connection: keep-alive`. A response framed by the close never keeps it.
  bool keep_alive = false;

  void Clear();
  // The first field named `name` (ASCII case-insensitively), or nullptr.
  const Field* Find(std::string_view name) const;
  std::size_t Count(std::string_view name) const;
};

// ASCII case-insensitive equality, as field names and tokens compare (common/text.h).
using ::drover::EqualsIgnoreCase;

// Calls `f(token)` for each element of a comma-separated list value (RFC 9110 5.6.1), the
// whitespace around each trimmed and empty elements skipped.
template <typename F>
void ForEachToken(std::string_view list, F&& f) {
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    std::string_view token = list.substr(0, comma);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) {
      token.remove_prefix(1);
    }
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty()) f(token);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

enum class ParseResult : std::uint8_t {
  kDone,      // `head` is filled; size() bytes of the input were the head
  kNeedMore,  // no complete head yet: call again with the same input and more after it
  kBad,       // not a head this gateway forwards; error() says why
  kTooLarge,  // no head end within max_bytes
};

// Finds and parses one head at the start of a connection's unconsumed input. Between calls on
// the same head the input only grows at its end; the parser remembers how far it looked for the
// end of the head, so a head that arrives a byte at a time is scanned once.
class HeadParser {
 public:
  explicit HeadParser(std::size_t max_bytes) : max_bytes_(max_bytes) {}

  // A request head: the method a token, the target any visible bytes, HTTP/1.0 or HTTP/1.1
  // (other versions are kBad). Framing: chunked, a Content-Length, or none; a request framed
  // any other way (a Transfer-Encoding not ending in chunked, or with a Content-Length, or in
  // HTTP/1.0) is kBad.
  ParseResult Request(std::string_view input, Head& head);
  // A response head to a request; `to_head` says that request was a HEAD (no body follows).
  // 1xx, 204 and 304 have no body; chunked wins over a Content-Length; codings without chunked
  // are framed by the close; chunked other than once and last, or in HTTP/1.0, is kBad.
  ParseResult Response(std::string_view input, bool to_head, Head& head);
  // For the next head on the connection.
  void Reset() {
    scanned_ = 0;
    size_ = 0;
    error_ = {};
  }

  std::size_t size() const { return size_; }
  std::string_view error() const { return error_; }

 private:
  // kDone with `size` the head's length through its empty line, or why there is none yet.
  ParseResult FindEnd(std::string_view input, std::size_t& size);
  ParseResult Fields(std::string_view lines, Head& head);
  // FindEnd, then `start_line(line)` (nullptr, or why the line is bad), then Fields.
  template <typename StartLine>
  ParseResult Parse(std::string_view input, Head& head, StartLine&& start_line);
  ParseResult Bad(const char* why) {
    error_ = why;
    return ParseResult::kBad;
  }

  std::size_t max_bytes_;
  std::size_t scanned_ = 0;  // input bytes known to hold no head end
  std::size_t size_ = 0;
  std::string_view error_;  // a static string
};

// Takes one body apart as its bytes arrive. Every call hands out at most one contiguous piece
// of payload, a view into the input it was given; chunk sizes, extensions, the line ends around
// chunks and trailers are consumed and dropped.
class BodyDecoder {
 public:
  struct Step {
    std::size_t used = 0;   // input bytes taken: `data` and the framing around it
    std::string_view data;  // payload, a view into the input
  };

  void Start(Framing framing, std::uint64_t content_length);
  // Takes what it can from the start of `input`; call again on the rest while `used` > 0 and
  // neither done() nor bad(). Stops at the end of the body: bytes after it are not taken.
  Step Next(std::string_view input);
  // The input ended (the peer closed): true when that ends the body (framed by the close),
  // false when it cuts the body short.
  bool End();

  bool done() const { return state_ == State::kDone; }
  bool bad() const { return state_ == State::kBad; }
  std::string_view error() const { return error_; }

 private:
  enum class State : std::uint8_t {
    kLength,     // counting down `remaining_`
    kClose,      // all of it until End()
    kSize,       // a chunk size's hex digits
    kSizeSpace,  // whitespace after them
    kExtension,  // a chunk extension, up to CR
    kSizeLf,     // the LF of a chunk-size line
    kData,       // chunk payload, `remaining_` left
    kDataCr,     // the CRLF after a chunk's payload
    kDataLf,
    kTrailerStart,  // the start of a trailer line, or the final CRLF
    kTrailer,       // a trailer line, up to CR
    kTrailerLf,
    kEndLf,  // the final LF
    kDone,
    kBad,
  };
  Step Chunked(std::string_view input);
  Step Fail(std::size_t used, const char* why) {
    state_ = State::kBad;
    error_ = why;
    return {used, {}};
  }

  State state_ = State::kDone;
  std::uint64_t remaining_ = 0;
  unsigned digits_ = 0;         // of the chunk size being read
  std::size_t line_bytes_ = 0;  // of the chunk-size line or trailer section being read
  std::string_view error_;      // a static string
};

// What frames a chunked payload again: "<size in hex>\r\n" before each piece, CRLF after it, and
// the last chunk (no trailers) after the final piece.
inline constexpr std::string_view kCrlf = "\r\n";
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
// The chunk header for a piece of `size` (> 0) bytes, written into `out` (room for 16 hex digits
// and CRLF); returns it.
std::string_view AppendChunkHeader(std::uint64_t size, char (&out)[18]);

// The reason phrase the gateway sends with a status of its own ("Bad Gateway"); "Unknown" for
// statuses it never sends.
std::string_view ReasonPhrase(unsigned status);

}  // namespace drover::gateway::http1
