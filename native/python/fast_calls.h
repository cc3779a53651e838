// The latency paths of allreduce, written against the C API (METH_FASTCALL) rather than bound
// with pybind11, whose generic dispatch of nine arguments cost about a tenth of a 4 KiB
// allreduce between two ranks (and as much again per gradient in DistributedOptimizer's step).
#pragma once
#include <pybind11/pybind11.h>

namespace hs {
namespace binding {

// Adds run_allreduce, enqueue_allreduce, enqueue_allreduce_group and enqueue_allreduce_batch to m.
void add_fast_calls(pybind11::module_& m);

}  // namespace binding
}  // namespace hs
