// JSON text written by hand, for the few places where building a document first costs more than
// the line itself: the JSON log lines and the records the registry keeps in a shared store.
#pragma once

#include <cstddef>
#include <string_view>

namespace drover {

// Length of the well-formed UTF-8 sequence starting at text[i] (Unicode table 3-7: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 when it is not one.
std::size_t Utf8SequenceLength(std::string_view text, std::size_t i);

// Appends a JSON string literal (RFC 8259) holding `text`, with every byte that is not part of a
// well-formed UTF-8 sequence replaced by U+FFFD, so the result is always valid JSON. `Buffer` is a
// std::string or a fmt::memory_buffer (anything with push_back and append(first, last)).
template <typename Buffer>
void AppendJsonString(Buffer& out, std::string_view text) {
  static constexpr std::string_view kHex = "0123456789abcdef";
  const auto put = [&out](std::string_view s) { out.append(s.data(), s.data() + s.size()); };
  out.push_back('"');
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          put("\\\"");
          break;
        case '\\':
          put("\\\\");
          break;
        case '\n':
          put("\\n");
          break;
        case '\r':
          put("\\r");
          break;
        case '\t':
          put("\\t");
          break;
        case '\b':
          put("\\b");
          break;
        case '\f':
          put("\\f");
          break;
        default:
          if (c < 0x20) {
            put("\\u00");
            out.push_back(kHex[c >> 4]);
            out.push_back(kHex[c & 0xF]);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    const std::size_t length = Utf8SequenceLength(text, i);
    if (length == 0) {
      put("\\ufffd");
      ++i;
    } else {
      put(text.substr(i, length));
      i += length;
    }
  }
  out.push_back('"');
}

}  // namespace drover
