// Adasum (adaptive summation, Horovod's op=Adasum). Two vectors combine as
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// which is their sum when they are orthogonal and their average when they are equal; a zero
// vector leaves the other unchanged (a rank that joined contributes zeros). Each tensor of the
// buffer (`counts`) gets its own dot product and norms.
//
// The ranks combine in a binary tree over rank order: (0,1), (2,3), ..., then pairs of those, and
// so on. For a power of two ranks this is Horovod's tree. For other counts the tree is the same
// pairing with the last subtree of a level that has no partner passed up unchanged, so 3 ranks give
// adasum(adasum(g0, g1), g2) and 6 ranks adasum(adasum(adasum(g0, g1), adasum(g2, g3)), adasum(g4, g5)):
// the defining properties (orthogonal parts add up, agreeing parts are not multiplied) hold for any
// tree, and every rank still gets the same result.
//
// Recursive doubling: at level d (1, 2, 4, ...) every rank holds its subtree's combined vector,
// exchanges it with a rank of the sibling subtree, and both compute adasum(left, right) with the
// left subtree's vector first, so every rank of the merged subtree holds the same bits. A sibling
// subtree may have fewer ranks than this one (non-powers of two): its ranks then each serve several
// of ours. Each level moves the whole buffer, log2(size) times in all; Horovod's vector-halving
// variant moves about twice the buffer in all, at the price of an allreduce of partial dot products
// per level. Dot products and norms accumulate in double; each combined element is computed in
// double and rounded to the tensor's dtype.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/checks.h"
#include "collectives/collectives.h"
#include "collectives/scratch.h"
#include "common/errors.h"
#include "common/half.h"

namespace hs {
namespace {

// Below this squared norm a vector counts as zero (its coefficient stays 1), as in Horovod.
const double kTinyNormSquared = std::sqrt(DBL_MIN);

template <class T>
struct Native {
  static double load(const void* p, size_t i) { return static_cast<double>(static_cast<const T*>(p)[i]); }
  static void store(void* p, size_t i, double v) { static_cast<T*>(p)[i] = static_cast<T>(v); }
};
struct Half {
  static double load(const void* p, size_t i) { return half_to_float(static_cast<const uint16_t*>(p)[i]); }
  static void store(void* p, size_t i, double v) {
    static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
  }
};
struct BFloat16 {
  static double load(const void* p, size_t i) { return bfloat16_to_float(static_cast<const uint16_t*>(p)[i]); }
  static void store(void* p, size_t i, double v) {
    static_cast<uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(v));
  }
};

// out = adasum(a, b), tensor by tensor; out may be a or b (each element is read before it is written).
template <class E>
void combine(const void* a, const void* b, void* out, const std::vector<size_t>& counts) {
  size_t at = 0;
  for (size_t count : counts) {
    double dot = 0, a2 = 0, b2 = 0;
    for (size_t i = at; i < at + count; ++i) {
      const double x = E::load(a, i), y = E::load(b, i);
      dot += x * y;
      a2 += x * x;
      b2 += y * y;
    }
    const double ca = a2 >= kTinyNormSquared ? 1.0 - dot / (2.0 * a2) : 1.0;
    const double cb = b2 >= kTinyNormSquared ? 1.0 - dot / (2.0 * b2) : 1.0;
    for (size_t i = at; i < at + count; ++i) E::store(out, i, ca * E::load(a, i) + cb * E::load(b, i));
    at += count;
  }
}

void combine(const void* a, const void* b, void* out, const std::vector<size_t>& counts, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return combine<Half>(a, b, out, counts);
    case DataType::kBFloat16: return combine<BFloat16>(a, b, out, counts);
    case DataType::kFloat32: return combine<Native<float>>(a, b, out, counts);
    case DataType::kFloat64: return combine<Native<double>>(a, b, out, counts);
    default: break;
  }
  throw CollectiveError(std::string("op=Adasum needs floating-point tensors (float16, bfloat16, float32 or "
                                    "float64), got ") +
                        dtype_name(dtype));
}

}  // namespace

void adasum_allreduce(Group& g, void* buf, const std::vector<size_t>& counts, DataType dtype) {
  check_group(g, "adasum");
  if (!dtype_is_float(dtype)) combine(buf, buf, buf, {}, dtype);  // throws the dtype error
  size_t total = 0;
  for (size_t c : counts) total += c;
  const size_t bytes = total * dtype_size(dtype);
  check_buffer(buf, bytes, "adasum", "buffer");
  const int n = g.size(), r = g.rank();
  if (n == 1 || bytes == 0) return;
  ScratchLease theirs(bytes);
  for (int d = 1; d < n; d *= 2) {
    const int base = r / (2 * d) * (2 * d), right = base + d;
    if (right >= n) continue;  // no sibling subtree at this level: ours passes up unchanged
    const int right_size = std::min(d, n - right);
    const bool left = r < right;
    std::vector<SendSpec> sends;
    RecvSpec from;
    if (left) {
      const int i = r - base;
      if (i < right_size) sends.push_back(SendSpec{right + i, buf, bytes});
      from.peer = right + i % right_size;
    } else {
      const int j = r - right;
      for (int i = j; i < d; i += right_size) sends.push_back(SendSpec{base + i, buf, bytes});
      from.peer = base + j;
    }
    from.dest = theirs.data();
    from.bytes = bytes;
    g.exchange(sends, {from});
    if (left) combine(buf, theirs.data(), buf, counts, dtype);
    else combine(theirs.data(), buf, buf, counts, dtype);
  }
}

}  // namespace hs
