// Names for the threads Drover starts, so that `top -H`, `ps -L`, `perf` and a debugger tell a
// registry's writer from its etcd feed or a gateway's io thread from its discovery thread.
#pragma once

#include <string_view>

namespace drover {

// Names the calling thread. Linux keeps 15 bytes of a name; a longer one is cut. Best effort:
// nothing depends on the name.
void NameThisThread(std::string_view name);

}  // namespace drover
