// Small text helpers shared by the HTTP APIs, the gateway, DNS and the rollout code.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace drover {

// "a=1&b=2" -> {a: 1, b: 2}. No percent-decoding: the APIs' values are names and numbers.
std::map<std::string, std::string, std::less<>> ParseQuery(std::string_view query);

// Every occurrence of `from` in `text` replaced by `to` (`from` non-empty).
std::string ReplaceAll(std::string text, std::string_view from, std::string_view to);

// "a, b,,c" -> {"a", "b", "", "c"}: the entries of a comma-separated list, trimmed of spaces,
// empty ones kept (callers say what an empty entry means).
std::vector<std::string> SplitCommaList(std::string_view list);

// ASCII case-insensitive equality (HTTP field names and tokens, DNS names).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// `text` with ASCII capitals lowered.
std::string AsciiLower(std::string_view text);

// The first `limit` bytes of `raw` with printable ASCII kept and every other byte (and the
// backslash) as \xNN, then "..." when `raw` was longer: raw bytes as a log line, a JSON string or
// a metric label can carry them (never invalid UTF-8).
std::string EscapeBytes(std::string_view raw, std::size_t limit = std::string_view::npos);

}  // namespace drover
