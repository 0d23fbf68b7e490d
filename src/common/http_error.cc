#include "common/http_error.h"

#include <nlohmann/json.hpp>

#include "common/fencing.h"

namespace drover {

unsigned HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAborted:
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kCancelled:
    case StatusCode::kUnknown:
    case StatusCode::kInternal:
    case StatusCode::kDataLoss:
      return 500;
  }
  return 500;
}

std::string ErrorCodeName(const Status& status) {
  // Fencing is the ABORTED clients branch on: it gets its own name.
  return IsFenced(status) ? "FENCED" : std::string(StatusCodeName(status.code()));
}

std::string ErrorBody(const Status& status) {
  nlohmann::json error = {{"code", ErrorCodeName(status)}, {"message", status.message()}};
  if (const auto newest = FencedNewestGeneration(status)) error["newest_generation"] = *newest;
  const nlohmann::json body = {{"error", std::move(error)}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Status StatusOfErrorReply(unsigned http_status, std::string_view body, std::string_view peer) {
  const std::string prefix = std::string(peer) + ": ";
  const auto parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    const nlohmann::json& error = parsed["error"];
    const std::string name = error.value("code", "");
    const std::string message = prefix + error.value("message", "");
    if (name == "FENCED") return AbortedError(message);
    for (int c = 1; c <= static_cast<int>(StatusCode::kUnauthenticated); ++c) {
      const auto code = static_cast<StatusCode>(c);
      if (StatusCodeName(code) == name) return Status(code, message);
    }
  }
  constexpr std::size_t kQuoted = 200;
  return UnavailableError(prefix + "HTTP " + std::to_string(http_status) + ": " +
                          std::string(body.substr(0, kQuoted)));
}

}  // namespace drover
