#include "transport/cpu_placement.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

namespace hs {

namespace {

constexpr int kMaxCpus = CpuMask::kWords * 64;
static_assert(kMaxCpus >= CPU_SETSIZE, "CpuMask holds every CPU a cpu_set_t can");

}  // namespace

int CpuMask::count() const {
  int n = 0;
  for (uint64_t w : words) n += __builtin_popcountll(w);
  return n;
}

CpuMask own_cpu_mask() {
  CpuMask mask;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return mask;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) mask.add(cpu);
  mask.known = mask.count() > 0;
  return mask;
}

int usable_cpus() {
  CpuMask mask = own_cpu_mask();
  if (mask.known) return mask.count();
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int cpus_in_union(const std::vector<CpuMask>& masks) {
  CpuMask all;
  for (const CpuMask& m : masks)
    for (int w = 0; w < CpuMask::kWords; ++w) all.words[w] |= m.words[w];
  return all.count();
}

bool each_has_own_cpu(const std::vector<CpuMask>& masks) {
  for (const CpuMask& m : masks)
    if (!m.known) return false;
  if (static_cast<int>(masks.size()) > cpus_in_union(masks)) return false;
  // Kuhn's augmenting paths: a host has at most a few hundred ranks and CPUs.
  std::vector<int> owner(kMaxCpus, -1);
  std::vector<char> seen;
  std::function<bool(int)> place = [&](int rank) {
    for (int cpu = 0; cpu < kMaxCpus; ++cpu) {
      if (!masks[rank].has(cpu) || seen[cpu]) continue;
      seen[cpu] = 1;
      if (owner[cpu] < 0 || place(owner[cpu])) {
        owner[cpu] = rank;
        return true;
      }
    }
    return false;
  };
  for (int rank = 0; rank < static_cast<int>(masks.size()); ++rank) {
    seen.assign(kMaxCpus, 0);
    if (!place(rank)) return false;
  }
  return true;
}

}  // namespace hs
