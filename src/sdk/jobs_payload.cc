// The result payload contract, the read classification and the error-text sanitizer
// (include/drover/jobs.h).
#include <nlohmann/json.hpp>

#include "drover/jobs.h"

namespace drover::jobs {
namespace {

using json = nlohmann::json;

Parsed Protocol(std::string problem) {
  Parsed p;
  p.kind = Parsed::Kind::kProtocolError;
  p.problem = std::move(problem);
  return p;
}

// What `v` is, for messages: "null", "an object", "a number", ...
std::string TypeName(const json& v) {
  if (v.is_null()) return "null";
  const std::string name = v.type_name();
  return (name == "object" || name == "array" ? "an " : "a ") + name;
}

// --- UTF-8 ----------------------------------------------------------------------------------

constexpr char32_t kReplacement = 0xFFFD;

// Decodes one code point at text[i]; on an invalid sequence returns U+FFFD and consumes one byte.
char32_t DecodeOne(std::string_view text, std::size_t& i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  std::size_t len = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++i;
    return kReplacement;
  }
  if (i + len > text.size()) {
    ++i;
    return kReplacement;
  }
  for (std::size_t k = 1; k < len; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return kReplacement;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and beyond U+10FFFF are not UTF-8.
  if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    ++i;
    return kReplacement;
  }
  i += len;
  return cp;
}

void Append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Bidirectional formatting characters: they can make a message read differently than it is.
bool IsBidiControl(char32_t cp) {
  return cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

// --- Redaction ------------------------------------------------------------------------------

// Characters that end a URL or a path.
bool EndsToken(char c) {
  return c == ' ' || c == '"' || c == '\'' || c == '<' || c == '>' || c == '(' || c == ')' ||
         c == '[' || c == ']' || c == '{' || c == '}' || c == ',' || c == ';' || c == '`';
}

bool StartsToken(std::string_view s, std::size_t i) { return i == 0 || EndsToken(s[i - 1]); }

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Length of a URL (scheme://...) at s[i], or 0.
std::size_t UrlAt(std::string_view s, std::size_t i) {
  std::size_t k = i;
  if (k >= s.size() || !IsAlpha(s[k])) return 0;
  while (k < s.size() && (IsAlpha(s[k]) || (s[k] >= '0' && s[k] <= '9') || s[k] == '+' ||
                          s[k] == '-' || s[k] == '.')) {
    ++k;
  }
  if (s.substr(k, 3) != "://") return 0;
  k += 3;
  while (k < s.size() && !EndsToken(s[k])) ++k;
  return k - i;
}

// Length of a file path at s[i] (/a/b, ~/a, ./a, ../a, C:\a), or 0.
std::size_t PathAt(std::string_view s, std::size_t i) {
  const std::string_view rest = s.substr(i);
  std::size_t prefix = 0;
  if (rest.size() >= 2 && rest[0] == '/' && !EndsToken(rest[1]) && rest[1] != '/') {
    prefix = 1;
  } else if (rest.substr(0, 2) == "~/" || rest.substr(0, 2) == "./") {
    prefix = 2;
  } else if (rest.substr(0, 3) == "../") {
    prefix = 3;
  } else if (rest.size() >= 3 && IsAlpha(rest[0]) && rest[1] == ':' && rest[2] == '\\') {
    prefix = 3;
  } else if (rest.substr(0, 2) == "//") {
    prefix = 2;  // a URL without its scheme
  } else {
    return 0;
  }
  std::size_t k = prefix;
  while (k < rest.size() && !EndsToken(rest[k])) ++k;
  if (k == prefix) return 0;
  return k;
}

// Sentence punctuation after a URL or path stays outside the redaction.
std::size_t TrimTrailing(std::string_view token) {
  std::size_t n = token.size();
  while (n > 1 && (token[n - 1] == '.' || token[n - 1] == ':' || token[n - 1] == '!' ||
                   token[n - 1] == '?')) {
    --n;
  }
  return n;
}

std::string Redact(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (StartsToken(s, i)) {
      if (const std::size_t n = UrlAt(s, i); n > 0) {
        const std::size_t keep = TrimTrailing(s.substr(i, n));
        out += "[url]";
        i += keep;
        continue;
      }
      if (const std::size_t n = PathAt(s, i); n > 0) {
        const std::size_t keep = TrimTrailing(s.substr(i, n));
        out += "[path]";
        i += keep;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

}  // namespace

std::string EncodeStepResult(const StepResult& result) {
  json j;
  if (result.status == StepResult::Status::kDone) {
    j = {{"status", "done"}, {"content", result.content}};
  } else {
    j = {{"status", "error"}, {"retryable", result.retryable}, {"message", result.message}};
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Parsed ParseStepResult(std::string_view payload) {
  if (payload.size() > kMaxPayloadBytes) {
    return Protocol("payload of " + std::to_string(payload.size()) + " bytes is over the " +
                    std::to_string(kMaxPayloadBytes) + "-byte limit");
  }
  const json j = json::parse(payload, nullptr, false);
  if (j.is_discarded())
    return Protocol("payload is not valid JSON (" + std::to_string(payload.size()) + " bytes)");
  if (!j.is_object()) return Protocol("payload is " + TypeName(j) + ", not an object");
  const auto status = j.find("status");
  if (status == j.end()) return Protocol("payload has no \"status\"");
  if (!status->is_string())
    return Protocol("\"status\" is " + TypeName(*status) + ", not a string");
  Parsed p;
  const std::string& s = status->get_ref<const std::string&>();
  if (s == "done") {
    p.kind = Parsed::Kind::kDone;
    p.result.status = StepResult::Status::kDone;
  } else if (s == "error") {
    p.kind = Parsed::Kind::kStepError;
    p.result.status = StepResult::Status::kError;
  } else {
    // Not echoed: an unknown status may be anything, and this text can reach a user.
    return Protocol("\"status\" is neither \"done\" nor \"error\"");
  }
  if (const auto r = j.find("retryable"); r != j.end()) {
    if (!r->is_boolean()) return Protocol("\"retryable\" is " + TypeName(*r) + ", not a boolean");
    p.result.retryable = r->get<bool>();
  }
  for (const auto& [key, field] :
       {std::pair{"message", &p.result.message}, std::pair{"content", &p.result.content}}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) {
      return Protocol(std::string("\"") + key + "\" is " + TypeName(*it) + ", not a string");
    }
    *field = it->get<std::string>();
  }
  return p;
}

std::string_view ReadClassName(ReadClass c) {
  switch (c) {
    case ReadClass::kNotReady:
      return "NOT_READY";
    case ReadClass::kTransient:
      return "TRANSIENT";
    case ReadClass::kTerminal:
      return "TERMINAL";
  }
  return "?";
}

ReadClass Classify(const Result<std::optional<std::string>>& read) {
  if (read.ok()) return read->has_value() ? ReadClass::kTerminal : ReadClass::kNotReady;
  switch (read.status().code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kAborted:
    case StatusCode::kResourceExhausted:
      return ReadClass::kTransient;
    default:
      return ReadClass::kTerminal;
  }
}

std::string SanitizeErrorText(std::string_view text, const SanitizeOptions& options) {
  // 1 and 2: valid UTF-8, without control or bidi characters.
  std::string clean;
  clean.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const char32_t cp = DecodeOne(text, i);
    if (cp == 0x1B && i < text.size() && text[i] == '[') {
      // A terminal escape sequence (colours, cursor moves): all of it goes, not just the ESC.
      ++i;
      while (i < text.size() && !(text[i] >= 0x40 && text[i] <= 0x7E)) ++i;
      if (i < text.size()) ++i;
      continue;
    }
    if (cp == '\t' || cp == '\n' || cp == '\r') {
      clean += ' ';
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || IsBidiControl(cp)) {
      continue;
    } else {
      Append(clean, cp);
    }
  }
  // 3: no URL, no path.
  std::string out = Redact(clean);
  // 4: the limit, on a character boundary.
  if (out.size() > options.max_bytes) {
    const std::string_view ellipsis = "...";
    std::size_t cut = options.max_bytes > ellipsis.size() ? options.max_bytes - ellipsis.size() : 0;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
    if (options.max_bytes >= ellipsis.size()) out += ellipsis;
  }
  return out;
}

}  // namespace drover::jobs
