// The memory allocator the process runs on. The `drover` binary links mimalloc (CMake option
// DROVER_MIMALLOC; docs/ARCHITECTURE.md, "The allocator"); the libraries, the SDK and the tests
// keep whatever their program uses. Both calls ask at run time, so they are right for a program on
// glibc's malloc, on mimalloc, or on jemalloc or tcmalloc linked or preloaded by its operator.
#pragma once

#include <string>

namespace drover {

// "mimalloc 2.0.9", "jemalloc 5.3.0-...", "gperftools 2.10" (tcmalloc), else "glibc malloc" (or
// "malloc" on another C library).
std::string AllocatorName();

// Gives the allocator's free pages back to the system now: after a large answer was built and
// freed (tens of MB), so the memory a rare big request used does not stay resident: mimalloc's
// mi_collect(true), jemalloc's purge of every arena, tcmalloc's ReleaseFreeMemory, glibc's
// malloc_trim. Costs milliseconds; call it only after such a burst.
void ReleaseFreeMemory();

}  // namespace drover
