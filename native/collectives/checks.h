// Argument validation shared by the collectives. Every check runs before the first message, and
// the arguments are the same on every rank (negotiated by the engine), so all ranks throw the
// same CollectiveError and none is left waiting for a peer.
#pragma once
#include <cstddef>
#include <vector>
#include "common/dtype.h"
#include "transport/group.h"

namespace hs {

void check_group(const Group& g, const char* who);
void check_dtype(DataType dtype, const char* who);
// op must be element-wise: Sum, Min, Max or Product.
void check_reduce_op(ReduceOp op, const char* who);
void check_per_rank(const std::vector<size_t>& v, int n, const char* who, const char* what);
void check_buffer(const void* p, size_t bytes, const char* who, const char* what);

}  // namespace hs
