#include "collectives/rank_order.h"

#include <cstring>
#include "common/reduce.h"

namespace hs {

namespace {
// The running value stays in L1 while all n inputs stream through it once.
constexpr size_t kBlockBytes = 16 * 1024;
}  // namespace

void reduce_in_rank_order(void* out, const std::vector<const void*>& srcs, size_t count, DataType dtype, ReduceOp op) {
  const size_t n = srcs.size(), es = dtype_size(dtype);
  char* dst = static_cast<char*>(out);
  if (n == 0 || count == 0) return;
  if (n == 1) {
    if (srcs[0] != out) std::memcpy(dst, srcs[0], count * es);
    return;
  }
  auto src = [&](size_t k, size_t byte) { return static_cast<const char*>(srcs[k]) + byte; };
  alignas(64) char acc[kBlockBytes];
  const size_t block = kBlockBytes / es;
  for (size_t i = 0; i < count; i += block) {
    const size_t m = count - i < block ? count - i : block;
    const size_t b = i * es;
    if (n == 2) {
      reduce_buffers(dst + b, src(0, b), src(1, b), m, dtype, op);
      continue;
    }
    // The block of `out` is written only by the last step, after every input's block has been
    // read, so `out` may be one of the inputs.
    reduce_buffers(acc, src(0, b), src(1, b), m, dtype, op);
    for (size_t k = 2; k + 1 < n; ++k) reduce_buffers(acc, acc, src(k, b), m, dtype, op);
    reduce_buffers(dst + b, acc, src(n - 1, b), m, dtype, op);
  }
}

}  // namespace hs
