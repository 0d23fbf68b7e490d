// Status and Result<T>: the error model of every Drover API.
//
// A Status carries a gRPC-style code and a human-readable message. Result<T> holds either a value
// or a non-OK Status. Both are plain values: copyable, movable, thread-compatible (no internal
// synchronisation; share them like any other value). No Drover API throws across a part boundary;
// failures travel as Status.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace drover {

// Same numbering as grpc::StatusCode so that conversion at the RPC edge is a cast.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "OK", "INVALID_ARGUMENT", ... as gRPC spells them.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: weight must be positive", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// One factory per error code: `return NotFoundError("no instance z1");`.
inline Status CancelledError(std::string msg) {
  return Status(StatusCode::kCancelled, std::move(msg));
}
inline Status UnknownError(std::string msg) { return Status(StatusCode::kUnknown, std::move(msg)); }
inline Status InvalidArgumentError(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}
inline Status DeadlineExceededError(std::string msg) {
  return Status(StatusCode::kDeadlineExceeded, std::move(msg));
}
inline Status NotFoundError(std::string msg) {
  return Status(StatusCode::kNotFound, std::move(msg));
}
inline Status AlreadyExistsError(std::string msg) {
  return Status(StatusCode::kAlreadyExists, std::move(msg));
}
inline Status PermissionDeniedError(std::string msg) {
  return Status(StatusCode::kPermissionDenied, std::move(msg));
}
inline Status ResourceExhaustedError(std::string msg) {
  return Status(StatusCode::kResourceExhausted, std::move(msg));
}
inline Status FailedPreconditionError(std::string msg) {
  return Status(StatusCode::kFailedPrecondition, std::move(msg));
}
inline Status AbortedError(std::string msg) { return Status(StatusCode::kAborted, std::move(msg)); }
inline Status OutOfRangeError(std::string msg) {
  return Status(StatusCode::kOutOfRange, std::move(msg));
}
inline Status UnimplementedError(std::string msg) {
  return Status(StatusCode::kUnimplemented, std::move(msg));
}
inline Status InternalError(std::string msg) {
  return Status(StatusCode::kInternal, std::move(msg));
}
inline Status UnavailableError(std::string msg) {
  return Status(StatusCode::kUnavailable, std::move(msg));
}
inline Status DataLossError(std::string msg) {
  return Status(StatusCode::kDataLoss, std::move(msg));
}
inline Status UnauthenticatedError(std::string msg) {
  return Status(StatusCode::kUnauthenticated, std::move(msg));
}

namespace internal {
[[noreturn]] void DieOnBadResultAccess(const Status& status);
}  // namespace internal

// Either a T or a non-OK Status. Constructing a Result from an OK Status is a programming error
// and yields an INTERNAL status instead, so that a Result never claims success without a value.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status)                          // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? InternalError("Result constructed from an OK status")
                            : std::move(status)) {}

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // Precondition: ok(). Reading the value of an error is a programming error: the process
  // aborts with the status on stderr rather than read garbage.
  const T& value() const& { return (CheckOk(), *value_); }
  T& value() & { return (CheckOk(), *value_); }
  T&& value() && { return (CheckOk(), std::move(*value_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  T value_or(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

 private:
  void CheckOk() const {
    if (!value_.has_value()) internal::DieOnBadResultAccess(status_);
  }

  std::optional<T> value_;
  Status status_;  // OK exactly when value_ is set.
};

}  // namespace drover

#define DROVER_STATUS_CONCAT_INNER_(a, b) a##b
#define DROVER_STATUS_CONCAT_(a, b) DROVER_STATUS_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define DROVER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::drover::Status drover_status_ = (expr);        \
    if (!drover_status_.ok()) return drover_status_; \
  } while (false)

// `DROVER_ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns x from a Result, or returns its
// Status from the enclosing function.
#define DROVER_ASSIGN_OR_RETURN(lhs, rexpr) \
  DROVER_ASSIGN_OR_RETURN_IMPL_(DROVER_STATUS_CONCAT_(drover_result_, __LINE__), lhs, rexpr)
#define DROVER_ASSIGN_OR_RETURN_IMPL_(result, lhs, rexpr) \
  auto result = (rexpr);                                  \
  if (!result.ok()) return result.status();               \
  lhs = std::move(result).value()
