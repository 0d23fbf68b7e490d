#include "gateway/http_check.h"

namespace drover::gateway {

namespace {

using http1::EqualsIgnoreCase;
using http1::Framing;

void Append(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ").append(value).append("\r\n");
}

bool Named(std::string_view name, std::string_view a) { return EqualsIgnoreCase(name, a); }

}  // namespace

std::string_view CheckRequestHead(const http1::Head& req) {
  if (req.target.empty() || req.target[0] != '/') return "the target must be a path (origin form)";
  // (RFC 9112 3.2: more than one Host is refused in any version; HTTP/1.0 may have none.)
  const std::size_t hosts = req.Count("host");
  if (hosts > 1 || (req.version == 11 && hosts == 0)) {
    return req.version == 11 ? "HTTP/1.1 requires exactly one Host header"
                             : "more than one Host header";
  }
  return {};
}

bool IsHopByHop(const http1::Head& head, std::string_view name) {
  switch (name.size()) {
    case 2:
      if (Named(name, "te")) return true;
      break;
    case 7:
      if (Named(name, "trailer") || Named(name, "upgrade")) return true;
      break;
    case 10:
      if (Named(name, "connection") || Named(name, "keep-alive")) return true;
      break;
    case 16:
      if (Named(name, "proxy-connection")) return true;
      break;
    default:
      break;
  }
  if (Named(name, "transfer-encoding") || Named(name, "content-length") || Named(name, "host")) {
    return false;
  }
  bool named = false;
  for (const http1::Field& f : head.fields) {
    if (named) break;
    if (f.name.size() != 10 || !Named(f.name, "connection")) continue;
    http1::ForEachToken(
        f.value, [&](std::string_view token) { named = named || EqualsIgnoreCase(token, name); });
  }
  return named;
}

void WriteRequestHead(const http1::Head& req, std::string_view client_ip, std::string& out) {
  out.clear();
  out.append(req.method).append(" ").append(req.target).append(" HTTP/1.1\r\n");
  std::size_t forwarded = 0;
  for (const http1::Field& f : req.fields) {
    if (Named(f.name, "x-forwarded-for")) {
      ++forwarded;
    } else if (!Named(f.name, "expect") && !IsHopByHop(req, f.name)) {
      Append(out, f.name, f.value);
    }
  }
  out.append("X-Forwarded-For: ");
  if (forwarded > 0) {
    for (const http1::Field& f : req.fields) {
      if (Named(f.name, "x-forwarded-for")) out.append(f.value).append(", ");
    }
  }
  out.append(client_ip).append("\r\n\r\n");
}

Framing ClientFraming(const http1::Head& res, unsigned client_version) {
  if (res.framing == Framing::kClose && client_version == 11) return Framing::kChunked;
  if (res.framing == Framing::kChunked && client_version == 10) return Framing::kClose;
  return res.framing;
}

void WriteResponseHead(const http1::Head& res, unsigned client_version, Framing framing,
                       bool keep_alive, std::string& out) {
  out.clear();
  char status[4] = {static_cast<char>('0' + res.status / 100 % 10),
                    static_cast<char>('0' + res.status / 10 % 10),
                    static_cast<char>('0' + res.status % 10), ' '};
  out.append(client_version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ")
      .append(status, sizeof status)
      .append(res.reason)
      .append("\r\n");
  // Beside a Transfer-Encoding a Content-Length is wrong (RFC 9112 6.3), and an HTTP/1.0 client
  // is sent no Transfer-Encoding (RFC 9112 6.1), whatever the body: none (HEAD, 304), chunked
  // (sent framed by the close) or other codings framed by the close.
  const bool drop_length = res.framing == Framing::kChunked || res.framing == Framing::kClose;
  const bool drop_coding = client_version == 10;
  for (const http1::Field& f : res.fields) {
    if (IsHopByHop(res, f.name)) continue;
    if (drop_length && Named(f.name, "content-length")) continue;
    if (drop_coding && Named(f.name, "transfer-encoding")) continue;
    Append(out, f.name, f.value);
  }
  // (After the upstream's own codings, if any: it becomes the last one.)
  if (framing == Framing::kChunked && res.framing == Framing::kClose) {
    Append(out, "Transfer-Encoding", "chunked");
  }
  if (client_version == 11 && !keep_alive) Append(out, "Connection", "close");
  if (client_version == 10 && keep_alive) Append(out, "Connection", "keep-alive");
  out.append("\r\n");
}

}  // namespace drover::gateway
