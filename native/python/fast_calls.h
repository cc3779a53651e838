// The latency paths of allreduce (and the blocking calls of broadcast, allgather, alltoall and
// reducescatter), written against the C API (METH_FASTCALL) rather than bound
// with pybind11, whose generic dispatch of nine arguments cost about a tenth of a 4 KiB
// allreduce between two ranks (and as much again per gradient in DistributedOptimizer's step).
#pragma once
#include <pybind11/pybind11.h>

namespace hs {
namespace binding {

// Adds run_allreduce, run_broadcast, run_allgather, run_alltoall, run_reducescatter, enqueue_allreduce,
// enqueue_allreduce_group and enqueue_allreduce_batch to m.
void add_fast_calls(pybind11::module_& m);

}  // namespace binding
}  // namespace hs
