// The other YAML files Drover reads: the registry's --config, a deploy --spec and the registry's
// token file. The first byte picks the parser, the rest is the file. Any input must end in
// settings or an INVALID_ARGUMENT (yaml-cpp's exceptions must not escape), and settings that
// were accepted must be within the ranges the parser promises.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/tokens.h"
#include "registry/daemon_config.h"
#include "rollout/deploy_request.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string yaml(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto none_given = [](std::string_view) { return false; };
  switch (data[0] % 3) {
    case 0: {
      drover::registry::DaemonOptions args;
      const drover::Status s = drover::registry::ApplyDaemonConfig(yaml, "fuzz", none_given, args);
      if (s.ok() &&
          (args.tick_ms < 10 || args.tick_ms > 60'000 || args.max_body < 1024 ||
           !(args.self_preservation_fraction >= 0 && args.self_preservation_fraction <= 1) ||
           !(args.write_rate >= 0))) {
        std::abort();
      }
      if (!s.ok() && s.code() != drover::StatusCode::kInvalidArgument) std::abort();
      break;
    }
    case 1: {
      drover::rollout::DeployRequest args;
      const drover::Status s = drover::rollout::ApplyDeploySpec(yaml, "fuzz", none_given, args);
      if (!s.ok() && s.code() != drover::StatusCode::kInvalidArgument) std::abort();
      break;
    }
    default: {
      auto auth = drover::Authorizer::FromYaml(yaml);
      if (!auth.ok() && auth.status().code() != drover::StatusCode::kInvalidArgument) std::abort();
      if (auth.ok()) (void)(*auth)->Authenticate("Bearer 0123456789abcdef");
      break;
    }
  }
  return 0;
}
