// How a failed Status answers over HTTP: the one mapping every Drover HTTP API uses (the
// registry, the agent), so that a client reads the same code the same way from each.
//
//   status code                                    HTTP
//   INVALID_ARGUMENT, OUT_OF_RANGE                 400
//   UNAUTHENTICATED                                401
//   PERMISSION_DENIED                              403
//   NOT_FOUND                                      404
//   ABORTED (FENCED), ALREADY_EXISTS,
//     FAILED_PRECONDITION                          409
//   RESOURCE_EXHAUSTED                             429  (a body over the limit: 413, by the server)
//   UNIMPLEMENTED                                  501
//   UNAVAILABLE                                    503
//   DEADLINE_EXCEEDED                              504
//   CANCELLED, UNKNOWN, INTERNAL, DATA_LOSS        500
//
// The body is {"error":{"code":"<CODE>","message":"..."}}, where a fencing refusal's code is
// "FENCED" and also carries "newest_generation" (common/fencing.h), so a fenced writer learns the
// generation to beat without parsing the message.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover {

// The HTTP status answering `code` (200 for OK).
unsigned HttpStatusOf(StatusCode code);

// "FENCED" for a fencing refusal, otherwise StatusCodeName(code).
std::string ErrorCodeName(const Status& status);

// The JSON error body for `status`, newline-terminated. Bytes that are not UTF-8 in the message
// are replaced, never a reason to fail.
std::string ErrorBody(const Status& status);

// What a client makes of an error reply: the Status its body names (FENCED reads as ABORTED),
// with the message prefixed by "<peer>: ". A reply with no such body (a proxy's page, a cut-off
// body) is UNAVAILABLE, quoting the HTTP status and the start of the body.
Status StatusOfErrorReply(unsigned http_status, std::string_view body, std::string_view peer);

}  // namespace drover
