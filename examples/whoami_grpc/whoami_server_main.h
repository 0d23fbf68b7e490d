// The WhoAmI gRPC server's whole program, callable from the `whoami_server` executable and from
// `drover sample whoami`, which the demo runs.
#pragma once

namespace drover::examples {

// Blocks SIGTERM/SIGINT first: call it before any thread exists. Returns the exit code.
int WhoamiServerMain(int argc, char** argv);

}  // namespace drover::examples
