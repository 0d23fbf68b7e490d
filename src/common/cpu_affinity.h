// Which CPUs a process may run on, and keeping busy worker threads of one process off each
// other's CPUs.
//
// Why: two workers that are both busy and land on the same CPU take turns at the scheduler's
// granularity (a 4 ms tick on a HZ=250 kernel) and each one's connections wait out the other's
// turn. Measured on the gateway with two workers under HTTP keep-alive load on two cores: runs of
// exactly 4.0 ms, each ended by the sibling worker, 10-27 in half a second, and a p99 of 4.4-4.7 ms
// where the same build with the workers on distinct CPUs gave 1.9-2.3 ms (docs/ARCHITECTURE.md,
// gateway, eleventh pass).
#pragma once

#include <string>
#include <vector>

#include "drover/status.h"

namespace drover {

// The CPUs the calling thread may run on (sched_getaffinity), ascending; empty if unknown.
std::vector<int> AllowedCpus();

// Splits `allowed` into `workers` disjoint sets whose union is `allowed`: CPU allowed[j] goes to
// worker j % workers, so each worker keeps as many CPUs as there are to share and no two workers
// ever share one. Empty (leave every thread where the kernel puts it) when there is nothing to
// keep apart (fewer than 2 workers) or not enough CPUs (more workers than CPUs: some must share).
std::vector<std::vector<int>> SpreadCpus(const std::vector<int>& allowed, int workers);

// Restricts the calling thread to `cpus` (sched_setaffinity); the error says why not (a cpuset
// that no longer allows them, a CPU gone offline).
Status PinCurrentThread(const std::vector<int>& cpus);

// "0,2,4" for logs.
std::string CpuList(const std::vector<int>& cpus);

}  // namespace drover
