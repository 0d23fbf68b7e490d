#include "common/cpu_affinity.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace drover {

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<std::vector<int>> SpreadCpus(const std::vector<int>& allowed, int workers) {
  if (workers < 2 || allowed.size() < static_cast<std::size_t>(workers)) return {};
  std::vector<std::vector<int>> sets(static_cast<std::size_t>(workers));
  for (std::size_t j = 0; j < allowed.size(); ++j) {
    sets[j % sets.size()].push_back(allowed[j]);
  }
  return sets;
}

Status PinCurrentThread(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return InvalidArgumentError("CPU " + std::to_string(cpu) + " is out of range");
    }
    CPU_SET(cpu, &set);
  }
  if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
    return UnavailableError("cannot run on CPUs " + CpuList(cpus) + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

std::string CpuList(const std::vector<int>& cpus) {
  std::string out;
  for (int cpu : cpus) {
    if (!out.empty()) out += ',';
    out += std::to_string(cpu);
  }
  return out;
}

}  // namespace drover
