#include "common/allocator.h"

#include <malloc.h>

#include <cstddef>

// Each allocator the program may run on, known by a function only it defines: a weak reference
// is null unless the program was linked with (or preloaded) that allocator.
extern "C" {
// jemalloc (Debian's libjemalloc exports its API unprefixed).
int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen)
    __attribute__((weak));
// tcmalloc (gperftools).
const char* tc_version(int* major, int* minor, const char** patch) __attribute__((weak));
void MallocExtension_ReleaseFreeMemory() __attribute__((weak));
// mimalloc (the drover binary's).
int mi_version() __attribute__((weak));
void mi_collect(bool force) __attribute__((weak));
}

namespace drover {

std::string AllocatorName() {
  if (tc_version != nullptr) {
    const char* version = tc_version(nullptr, nullptr, nullptr);
    return version != nullptr ? std::string(version) : "tcmalloc";  // "gperftools x.y"
  }
  if (mallctl != nullptr) {
    const char* version = nullptr;
    std::size_t size = sizeof version;
    if (mallctl("version", &version, &size, nullptr, 0) == 0 && version != nullptr) {
      return std::string("jemalloc ") + version;
    }
    return "jemalloc";
  }
  if (mi_version != nullptr) {
    const int v = mi_version();  // 209: 2.0.9
    return "mimalloc " + std::to_string(v / 100) + "." + std::to_string(v / 10 % 10) + "." +
           std::to_string(v % 10);
  }
#if defined(__GLIBC__)
  return "glibc malloc";
#else
  return "malloc";
#endif
}

void ReleaseFreeMemory() {
  if (MallocExtension_ReleaseFreeMemory != nullptr) {
    MallocExtension_ReleaseFreeMemory();
  } else if (mallctl != nullptr) {
    // MALLCTL_ARENAS_ALL (4096 in jemalloc 5): every arena at once.
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
  } else if (mi_collect != nullptr) {
    // Empty segments go back now; pages freed inside segments still in use are decommitted by
    // the thread's own allocations once mimalloc's decommit delay (25 ms) has passed.
    mi_collect(true);
  } else {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
  }
}

}  // namespace drover
