// Whether this host's ranks each have a CPU of their own. Waiting by spinning pays only then: a
// rank that spins on a CPU it shares with the peer it waits for delays that peer instead.
//
// Each rank's own affinity mask does not answer it: a launcher that binds every rank to its own
// core (Open MPI by default, ours) leaves each rank one CPU while no two ranks share one, and a
// job started under `taskset` leaves every rank the same few CPUs. So the ranks of a host publish
// their masks at set-up and each decides from all of them.
#pragma once
#include <cstdint>
#include <vector>

namespace hs {

// A set of CPUs, as sched_getaffinity reports them (CPU_SETSIZE of them).
struct CpuMask {
  static constexpr int kWords = 16;
  uint64_t words[kWords] = {};
  bool known = false;  // false: the mask could not be read (more CPUs than kWords * 64, say)

  bool has(int cpu) const { return (words[cpu / 64] >> (cpu % 64)) & 1; }
  void add(int cpu) { words[cpu / 64] |= uint64_t(1) << (cpu % 64); }
  int count() const;
};

// This process's (calling thread's) affinity mask.
CpuMask own_cpu_mask();

// The CPUs this process may run on; the online CPUs if the mask cannot be read.
int usable_cpus();

// How many CPUs at least one of `masks` allows.
int cpus_in_union(const std::vector<CpuMask>& masks);

// Whether every mask can be given a CPU of its own, no CPU given twice (a bipartite matching).
// An unknown mask counts as sharing.
bool each_has_own_cpu(const std::vector<CpuMask>& masks);

}  // namespace hs
