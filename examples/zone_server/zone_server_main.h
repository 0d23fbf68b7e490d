// The zone server's whole program (flags, warm-up, serving, ordered shutdown on SIGTERM), callable
// from the `zone_server` executable and from `drover sample zone`, which the demo deploys.
#pragma once

namespace drover::examples {

// Blocks SIGTERM/SIGINT first: call it before any thread exists. Returns the exit code.
int ZoneServerMain(int argc, char** argv);

}  // namespace drover::examples
