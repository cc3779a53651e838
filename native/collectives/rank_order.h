// The local half of the direct (small-message) reductions.
#pragma once
#include <cstddef>
#include <vector>
#include "common/dtype.h"

namespace hs {

// out[i] = (((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ... op srcs[n-1][i]): one fixed order,
// so every rank that has the same inputs computes the same bits. out may be any one of srcs.
void reduce_in_rank_order(void* out, const std::vector<const void*>& srcs, size_t count, DataType dtype, ReduceOp op);

}  // namespace hs
