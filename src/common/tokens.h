// Bearer-token authorisation for the registry's and the agent's APIs (REG-8).
//
// A token file (YAML) lists the tokens a registry or an agent accepts:
//
//   tokens:
//     - name: zone-servers        # shown in logs, never the token itself
//       token: "7c1e...f9"        # at least 16 characters
//       write: ["zone", "chat"]   # services it may write in the registry; "*" for all
//     - name: deployer
//       token: "5d0e...a1"
//       deploy: ["zone"]          # services whose instances it may start and stop on agents
//     - name: dashboard
//       token: "0b3a...22"
//       read_only: true
//       expires: "2027-03-31T00:00:00Z"   # optional, UTC; refused from this instant on
//
// Every token may read; only the services listed under `write` may be written with it, and only
// those under `deploy` deployed (`write` does not imply `deploy`: one writes discovery entries,
// the other starts processes on a host). An
// expired token is refused like an unknown one (UNAUTHENTICATED), with its name and expiry in
// the message so that whoever holds it knows to rotate it. With no Authorizer (auth off)
// everything is allowed. Tokens are compared in constant time. Immutable after loading;
// thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover {

class Authorizer {
 public:
  struct Token {
    std::string name;
    std::string secret;
    bool read_only = false;
    std::vector<std::string> write;   // service names, or "*"
    std::vector<std::string> deploy;  // service names, or "*"
    std::optional<SystemTime> expires;
  };

  // Parses a token file. INVALID_ARGUMENT with the file and entry named on any malformed,
  // duplicate or too short token.
  static Result<std::shared_ptr<const Authorizer>> LoadFile(const std::string& path);
  static Result<std::shared_ptr<const Authorizer>> FromYaml(std::string_view yaml);

  // `authorization` is the raw Authorization header ("Bearer <token>"); empty when missing.
  // UNAUTHENTICATED when missing, unknown or expired at `now`; otherwise OK and the token's name.
  Result<std::string> Authenticate(std::string_view authorization,
                                   SystemTime now = std::chrono::system_clock::now()) const;
  // As Authenticate, then PERMISSION_DENIED unless the token may write `service`.
  Status AuthorizeWrite(std::string_view authorization, std::string_view service,
                        SystemTime now = std::chrono::system_clock::now()) const;

  // As Authenticate, then PERMISSION_DENIED unless the token may deploy `service`.
  Status AuthorizeDeploy(std::string_view authorization, std::string_view service,
                         SystemTime now = std::chrono::system_clock::now()) const;

  std::size_t size() const { return tokens_.size(); }

 private:
  explicit Authorizer(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
  // The token presented, or UNAUTHENTICATED (missing, unknown, expired).
  Result<const Token*> Find(std::string_view authorization, SystemTime now) const;

  std::vector<Token> tokens_;
};

}  // namespace drover
