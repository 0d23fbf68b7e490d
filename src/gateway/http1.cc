#include "gateway/http1.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace drover::gateway::http1 {

namespace {

// Byte classes (RFC 9110 5.6.2 tchar, 5.5 field-vchar; RFC 9112 3.2 request-target bytes).
enum : std::uint8_t {
  kToken = 1,   // a tchar
  kValue = 2,   // may appear in a field value or reason phrase: VCHAR, obs-text, SP, HTAB
  kTarget = 4,  // may appear in a request target: VCHAR and obs-text
  kHex = 8,
};

constexpr std::array<std::uint8_t, 256> MakeClasses() {
  std::array<std::uint8_t, 256> c{};
  for (int b = 0x21; b <= 0xff; ++b) {
    if (b != 0x7f) c[b] |= kValue | kTarget;
  }
  c[' '] |= kValue;
  c['\t'] |= kValue;
  for (const char t : std::string_view("!#$%&'*+-.^_`|~"))
    c[static_cast<unsigned char>(t)] |= kToken;
  for (int b = '0'; b <= '9'; ++b) c[b] |= kToken | kHex;
  for (int b = 'a'; b <= 'z'; ++b) c[b] |= kToken;
  for (int b = 'A'; b <= 'Z'; ++b) c[b] |= kToken;
  for (int b = 'a'; b <= 'f'; ++b) c[b] |= kHex;
  for (int b = 'A'; b <= 'F'; ++b) c[b] |= kHex;
  return c;
}

constexpr std::array<std::uint8_t, 256> kClasses = MakeClasses();

bool Is(char c, std::uint8_t cls) { return (kClasses[static_cast<unsigned char>(c)] & cls) != 0; }

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

unsigned HexValue(char c) {
  if (c >= '0' && c <= '9') return static_cast<unsigned>(c - '0');
  return static_cast<unsigned>(Lower(c) - 'a' + 10);
}

// "HTTP/1.0" or "HTTP/1.1" -> 10 or 11; another HTTP/d.d -> 1; anything else -> 0.
unsigned Version(std::string_view v) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (v.size() != 8 || v.substr(0, 5) != "HTTP/" || v[6] != '.' || !digit(v[5]) || !digit(v[7])) {
    return 0;
  }
  if (v[5] == '1' && (v[7] == '0' || v[7] == '1')) return v[7] == '0' ? 10 : 11;
  return 1;
}

// What the fields say about framing and the connection, gathered in one walk.
struct Framing1 {
  std::size_t lengths = 0;
  bool length_ok = true;
  std::uint64_t length = 0;
  bool transfer_encoding = false;
  std::size_t chunked = 0;  // how many times chunked is listed
  bool chunked_last = false;
  bool close = false;
  bool keep_alive = false;
};

bool ParseLength(std::string_view v, std::uint64_t& out) {
  if (v.empty() || v.size() > 19) return false;  // 19 digits never overflow 64 bits
  std::uint64_t n = 0;
  for (const char c : v) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<unsigned>(c - '0');
  }
  out = n;
  return true;
}

void Note(const Field& f, Framing1& fr) {
  const std::string_view n = f.name;
  if (n.size() == 14 && EqualsIgnoreCase(n, "content-length")) {
    ++fr.lengths;
    fr.length_ok = fr.length_ok && ParseLength(f.value, fr.length);
  } else if (n.size() == 17 && EqualsIgnoreCase(n, "transfer-encoding")) {
    fr.transfer_encoding = true;
    ForEachToken(f.value, [&](std::string_view coding) {
      fr.chunked_last = EqualsIgnoreCase(coding, "chunked");
      fr.chunked += fr.chunked_last;
    });
  } else if (n.size() == 10 && EqualsIgnoreCase(n, "connection")) {
    ForEachToken(f.value, [&](std::string_view option) {
      if (EqualsIgnoreCase(option, "close")) fr.close = true;
      if (EqualsIgnoreCase(option, "keep-alive")) fr.keep_alive = true;
    });
  }
}

bool KeepAlive(unsigned version, const Framing1& fr) {
  return !fr.close && (version == 11 || fr.keep_alive);
}

}  // namespace

void Head::Clear() {
  method = target = reason = {};
  status = 0;
  version = 11;
  fields.clear();
  framing = Framing::kNone;
  content_length = 0;
  keep_alive = false;
}

const Field* Head::Find(std::string_view name) const {
  for (const Field& f : fields) {
    if (EqualsIgnoreCase(f.name, name)) return &f;
  }
  return nullptr;
}

std::size_t Head::Count(std::string_view name) const {
  return static_cast<std::size_t>(std::count_if(fields.begin(), fields.end(), [&](const Field& f) {
    return EqualsIgnoreCase(f.name, name);
  }));
}

ParseResult HeadParser::FindEnd(std::string_view input, std::size_t& size) {
  // Line by line: every LF must follow a CR, and the head ends at the first empty line.
  std::size_t line = scanned_;
  while (const void* lf = std::memchr(input.data() + line, '\n', input.size() - line)) {
    const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(lf) - input.data());
    if (at >= max_bytes_) return ParseResult::kTooLarge;
    if (at == 0 || input[at - 1] != '\r') return Bad("a line ends in LF without CR");
    if (at == line + 1) {
      if (line == 0) return Bad("an empty line before the start line");
      size = at + 1;
      return ParseResult::kDone;
    }
    line = at + 1;
  }
  scanned_ = line;
  return input.size() >= max_bytes_ ? ParseResult::kTooLarge : ParseResult::kNeedMore;
}

ParseResult HeadParser::Fields(std::string_view lines, Head& head) {
  // `lines`: the field lines, each ending in CRLF, then the empty line's CRLF.
  Framing1 fr;
  while (lines.size() > 2) {
    // FindEnd saw CRLF end every line; a CR anywhere else fails the byte classes below.
    const std::size_t end = lines.find('\n');
    const std::string_view line = lines.substr(0, end - 1);
    lines.remove_prefix(end + 1);
    std::size_t i = 0;
    while (i < line.size() && Is(line[i], kToken)) ++i;
    if (i == 0) {
      return Bad(line[0] == ' ' || line[0] == '\t' ? "a folded field line" : "a bad field name");
    }
    if (i == line.size() || line[i] != ':')
      return Bad("a field line without a colon after its name");
    std::string_view value = line.substr(i + 1);
    for (const char c : value) {
      if (!Is(c, kValue)) return Bad("a control byte in a field value");
    }
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    head.fields.push_back({line.substr(0, i), value});
    Note(head.fields.back(), fr);
  }
  if (fr.lengths > 1) return Bad("more than one Content-Length");
  if (!fr.length_ok) return Bad("a Content-Length that is not a number");
  head.keep_alive = KeepAlive(head.version, fr);
  const bool chunked = fr.transfer_encoding && fr.chunked == 1 && fr.chunked_last;
  if (head.status == 0) {  // a request
    if (fr.transfer_encoding) {
      if (!chunked || fr.lengths > 0 || head.version == 10) {
        return Bad("Transfer-Encoding must end in chunked and comes without Content-Length");
      }
      head.framing = Framing::kChunked;
    } else if (fr.lengths == 1) {
      head.framing = Framing::kLength;
      head.content_length = fr.length;
    }
    return ParseResult::kDone;
  }
  // A response, whose body has not been ruled out by the caller.
  if (head.framing == Framing::kNone) return ParseResult::kDone;
  if (fr.transfer_encoding) {
    // A Transfer-Encoding wins over a Content-Length (RFC 9112 6.3); with codings but no
    // chunked, the close ends the body. Chunked elsewhere than last, or more than once, or in
    // HTTP/1.0, cannot be relayed faithfully.
    if (head.version == 10) return Bad("Transfer-Encoding in an HTTP/1.0 response");
    if (fr.chunked > 0 && !chunked) return Bad("chunked not applied last, or more than once");
    head.framing = chunked ? Framing::kChunked : Framing::kClose;
    // Both framings: the sender is broken or something between tried to split the stream
    // (RFC 9112 6.3 says to treat it as an error); this response is relayed by its coding, and
    // the connection is not used again.
    if (fr.lengths > 0) head.keep_alive = false;
  } else if (fr.lengths == 1) {
    head.framing = Framing::kLength;
    head.content_length = fr.length;
  } else {
    head.framing = Framing::kClose;
  }
  if (head.framing == Framing::kClose) head.keep_alive = false;
  return ParseResult::kDone;
}

template <typename StartLine>
ParseResult HeadParser::Parse(std::string_view input, Head& head, StartLine&& start_line) {
  std::size_t size = 0;
  if (const ParseResult end = FindEnd(input, size); end != ParseResult::kDone) return end;
  head.Clear();
  const std::size_t line_end = input.find('\n') - 1;  // FindEnd saw it, after a CR
  if (const char* why = start_line(input.substr(0, line_end))) return Bad(why);
  const ParseResult r = Fields(input.substr(line_end + 2, size - line_end - 2), head);
  if (r == ParseResult::kDone) size_ = size;
  return r;
}

ParseResult HeadParser::Request(std::string_view input, Head& head) {
  return Parse(input, head, [&head](std::string_view line) -> const char* {
    std::size_t i = 0;
    while (i < line.size() && Is(line[i], kToken)) ++i;
    if (i == 0 || i == line.size() || line[i] != ' ') return "a malformed request line";
    head.method = line.substr(0, i);
    const std::size_t target_start = ++i;
    while (i < line.size() && Is(line[i], kTarget)) ++i;
    if (i == target_start || i == line.size() || line[i] != ' ') return "a malformed request line";
    head.target = line.substr(target_start, i - target_start);
    const unsigned version = Version(line.substr(i + 1));
    if (version == 0) return "a malformed request line";
    if (version == 1) return "HTTP/1.0 or HTTP/1.1 only";
    head.version = version;
    return nullptr;
  });
}

ParseResult HeadParser::Response(std::string_view input, bool to_head, Head& head) {
  return Parse(input, head, [&head, to_head](std::string_view line) -> const char* {
    // HTTP/1.x SP 3DIGIT [SP reason]
    const unsigned version = line.size() >= 12 ? Version(line.substr(0, 8)) : 0;
    if (version < 10 || line[8] != ' ') return "not an HTTP/1.0 or HTTP/1.1 status line";
    unsigned status = 0;
    for (std::size_t d = 9; d < 12; ++d) {
      if (line[d] < '0' || line[d] > '9') return "a malformed status code";
      status = status * 10 + static_cast<unsigned>(line[d] - '0');
    }
    if (status < 100) return "a malformed status code";
    if (line.size() > 12) {
      if (line[12] != ' ') return "a malformed status line";
      for (const char c : line.substr(13)) {
        if (!Is(c, kValue)) return "a control byte in the reason phrase";
      }
      head.reason = line.substr(13);
    }
    head.version = version;
    head.status = status;
    const bool bodyless = to_head || status < 200 || status == 204 || status == 304;
    head.framing = bodyless ? Framing::kNone : Framing::kClose;  // Fields() settles the rest
    return nullptr;
  });
}

void BodyDecoder::Start(Framing framing, std::uint64_t content_length) {
  remaining_ = 0;
  digits_ = 0;
  line_bytes_ = 0;
  error_ = {};
  switch (framing) {
    case Framing::kNone:
      state_ = State::kDone;
      break;
    case Framing::kLength:
      remaining_ = content_length;
      state_ = content_length == 0 ? State::kDone : State::kLength;
      break;
    case Framing::kChunked:
      state_ = State::kSize;
      break;
    case Framing::kClose:
      state_ = State::kClose;
      break;
  }
}

BodyDecoder::Step BodyDecoder::Next(std::string_view input) {
  switch (state_) {
    case State::kLength: {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, input.size()));
      remaining_ -= n;
      if (remaining_ == 0) state_ = State::kDone;
      return {n, input.substr(0, n)};
    }
    case State::kClose:
      return {input.size(), input};
    case State::kDone:
    case State::kBad:
      return {};
    default:
      return Chunked(input);
  }
}

BodyDecoder::Step BodyDecoder::Chunked(std::string_view input) {
  // Bounds on what is read and dropped: a chunk-size line with its extensions, and trailers.
  constexpr std::size_t kMaxSizeLine = 4096;
  constexpr std::size_t kMaxTrailers = 16 * 1024;
  std::size_t i = 0;
  while (i < input.size()) {
    const char c = input[i];
    switch (state_) {
      case State::kSize:
        if (Is(c, kHex)) {
          if (digits_ == 16) return Fail(i, "a chunk size over 64 bits");
          remaining_ = remaining_ * 16 + HexValue(c);
          ++digits_;
        } else if (digits_ == 0) {
          return Fail(i, "a malformed chunk size");
        } else if (c == ';') {
          state_ = State::kExtension;
        } else if (c == ' ' || c == '\t') {
          state_ = State::kSizeSpace;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
        } else {
          return Fail(i, "a malformed chunk size");
        }
        break;
      case State::kSizeSpace:
        if (c == ';') {
          state_ = State::kExtension;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (c != ' ' && c != '\t') {
          return Fail(i, "a malformed chunk size");
        }
        break;
      case State::kExtension:
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (!Is(c, kValue)) {
          return Fail(i, "a control byte in a chunk extension");
        } else if (++line_bytes_ > kMaxSizeLine) {
          return Fail(i, "a chunk extension over 4 KiB");
        }
        break;
      case State::kSizeLf:
        if (c != '\n') return Fail(i, "a chunk-size line without CRLF");
        line_bytes_ = 0;
        digits_ = 0;
        state_ = remaining_ == 0 ? State::kTrailerStart : State::kData;
        break;
      case State::kData: {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, input.size() - i));
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kDataCr;
        return {i + n, input.substr(i, n)};
      }
      case State::kDataCr:
        if (c != '\r') return Fail(i, "chunk data longer than its size");
        state_ = State::kDataLf;
        break;
      case State::kDataLf:
        if (c != '\n') return Fail(i, "chunk data without CRLF after it");
        state_ = State::kSize;
        break;
      case State::kTrailerStart:
        if (c == '\r') {
          state_ = State::kEndLf;
          break;
        }
        [[fallthrough]];
      case State::kTrailer:
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else if (!Is(c, kValue)) {
          return Fail(i, "a control byte in a trailer");
        } else if (++line_bytes_ > kMaxTrailers) {
          return Fail(i, "trailers over 16 KiB");
        } else {
          state_ = State::kTrailer;
        }
        break;
      case State::kTrailerLf:
        if (c != '\n') return Fail(i, "a trailer line without CRLF");
        state_ = State::kTrailerStart;
        break;
      case State::kEndLf:
        if (c != '\n') return Fail(i, "a chunked body without CRLF at its end");
        state_ = State::kDone;
        return {i + 1, {}};
      default:
        return {i, {}};
    }
    ++i;
  }
  return {i, {}};
}

bool BodyDecoder::End() {
  if (state_ == State::kClose) state_ = State::kDone;
  return state_ == State::kDone;
}

std::string_view AppendChunkHeader(std::uint64_t size, char (&out)[18]) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char* end = out + 16;
  char* p = end;
  do {
    *--p = kDigits[size & 0xf];
    size >>= 4;
  } while (size != 0);
  end[0] = '\r';
  end[1] = '\n';
  return {p, static_cast<std::size_t>(end + 2 - p)};
}

std::string_view ReasonPhrase(unsigned status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 417:
      return "Expectation Failed";
    case 431:
      return "Request Header Fields Too Large";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

}  // namespace drover::gateway::http1
