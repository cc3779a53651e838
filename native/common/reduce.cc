// Reduction and scaling kernels. They run inside the transport's receive path on every large
// allreduce, so each dtype x op is a plain loop the compiler vectorises at -O3: __restrict
// pointers, select-style min/max, integer arithmetic in unsigned types (defined wrap-around;
// signed overflow would be UB and would also block vectorisation).
//
// The wheel targets baseline x86_64 (SSE2), so every loop is compiled twice: once for the
// baseline and once with AVX2+F16C, picked at run time. F16C turns float16 conversion from a
// dozen integer ops into one instruction (about 4x faster end to end). Both variants give
// bit-identical results (same IEEE operations, conversions checked exhaustively against F16C),
// so ranks on different CPUs still agree bit for bit.
#include "common/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "common/errors.h"
#include "common/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(HS_REDUCE_FORCE_GENERIC)
#define HS_REDUCE_AVX2 1
#include <immintrin.h>
#define HS_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#endif

#define HS_ALWAYS_INLINE inline __attribute__((always_inline))

namespace hs {
namespace {

// ---- element operations -------------------------------------------------------------------

struct LogicalOr {
  uint8_t operator()(uint8_t a, uint8_t b) const { return uint8_t((a | b) != 0); }
};
struct LogicalAnd {
  uint8_t operator()(uint8_t a, uint8_t b) const { return uint8_t((a != 0) & (b != 0)); }
};

template <class T, bool = std::is_integral_v<T>>
struct WideOf {
  using type = T;
};
// Types narrower than unsigned int widen to it: otherwise C++ promotes them to (signed) int, and
// the product of two 16-bit values may overflow int.
template <class T>
struct WideOf<T, true> {
  using type = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};
template <class T>
using Wide = typename WideOf<T>::type;  // unsigned for integers: wrap-around is defined

struct SumOp {
  using BoolOp = LogicalOr;
  template <class T>
  T operator()(T a, T b) const {
    return T(Wide<T>(a) + Wide<T>(b));
  }
};
struct ProductOp {
  using BoolOp = LogicalAnd;
  template <class T>
  T operator()(T a, T b) const {
    return T(Wide<T>(a) * Wide<T>(b));
  }
};
// Min/Max propagate NaN like torch.minimum/maximum (a NaN gradient must not vanish). The first
// select is exactly MINPS/MAXPS, which already returns `a` when a is NaN; only a NaN in b needs
// the second select.
struct MinOp {
  using BoolOp = LogicalAnd;
  template <class T>
  T operator()(T a, T b) const {
    const T m = b < a ? b : a;
    if constexpr (std::is_floating_point_v<T>) return b != b ? b : m;
    return m;
  }
};
struct MaxOp {
  using BoolOp = LogicalOr;
  template <class T>
  T operator()(T a, T b) const {
    const T m = a < b ? b : a;
    if constexpr (std::is_floating_point_v<T>) return b != b ? b : m;
    return m;
  }
};

// ---- loop bodies, shared by both instruction-set variants ----------------------------------
// always_inline so that each body is compiled inside (and for the target of) its caller.

template <class T, class F>
HS_ALWAYS_INLINE void body_distinct(T* __restrict d, const T* __restrict a, const T* __restrict b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}
template <class T, class F>
HS_ALWAYS_INLINE void body_into_a(T* __restrict d, const T* __restrict b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) d[i] = f(d[i], b[i]);
}
template <class T, class F>
HS_ALWAYS_INLINE void body_into_b(T* __restrict d, const T* __restrict a, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) d[i] = f(a[i], d[i]);
}

// float16/bfloat16 go through float32 in blocks small enough to stay in L1.
constexpr size_t kHalfBlock = 1024;

template <class H, class F>
HS_ALWAYS_INLINE void body_half(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n, F f) {
  alignas(64) float fa[kHalfBlock];
  alignas(64) float fb[kHalfBlock];
  // Each block is read whole before it is written, so d may alias a or b.
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = n - i < kHalfBlock ? n - i : kHalfBlock;
    H::to_float(a + i, fa, m);
    H::to_float(b + i, fb, m);
    for (size_t j = 0; j < m; ++j) fa[j] = f(fa[j], fb[j]);
    H::from_float(fa, d + i, m);
  }
}

template <class T>
HS_ALWAYS_INLINE void body_scale_float(T* __restrict p, size_t n, T f) {
  for (size_t i = 0; i < n; ++i) p[i] *= f;
}

// Integers scale in S (float or double, per reduce.h) and truncate toward zero; saturating
// first because converting an out-of-range float to an integer is undefined behaviour.
template <class T, class S>
HS_ALWAYS_INLINE void body_scale_int(T* __restrict p, size_t n, S f, S lo, S hi) {
  using Conv = std::conditional_t<sizeof(T) == 8, int64_t, int32_t>;
  for (size_t i = 0; i < n; ++i) {
    S v = S(p[i]) * f;
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    p[i] = T(Conv(v));
  }
}

template <class H>
HS_ALWAYS_INLINE void body_scale_half(uint16_t* p, size_t n, float f) {
  alignas(64) float t[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = n - i < kHalfBlock ? n - i : kHalfBlock;
    H::to_float(p + i, t, m);
    for (size_t j = 0; j < m; ++j) t[j] *= f;
    H::from_float(t, p + i, m);
  }
}

struct SoftFp16 {
  HS_ALWAYS_INLINE static void to_float(const uint16_t* s, float* d, size_t n) { half_to_float(s, d, n); }
  HS_ALWAYS_INLINE static void from_float(const float* s, uint16_t* d, size_t n) { float_to_half(s, d, n); }
};
struct SoftBf16 {
  HS_ALWAYS_INLINE static void to_float(const uint16_t* s, float* d, size_t n) { bfloat16_to_float(s, d, n); }
  HS_ALWAYS_INLINE static void from_float(const float* s, uint16_t* d, size_t n) { float_to_bfloat16(s, d, n); }
};

// ---- instruction-set variants: the only functions that carry a target ---------------------

struct Generic {
  using Fp16 = SoftFp16;
  template <class T, class F>
  static void distinct(T* d, const T* a, const T* b, size_t n, F f) {
    body_distinct(d, a, b, n, f);
  }
  template <class T, class F>
  static void into_a(T* d, const T* b, size_t n, F f) {
    body_into_a(d, b, n, f);
  }
  template <class T, class F>
  static void into_b(T* d, const T* a, size_t n, F f) {
    body_into_b(d, a, n, f);
  }
  template <class H, class F>
  static void half(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n, F f) {
    body_half<H>(d, a, b, n, f);
  }
  template <class T>
  static void scale_float(T* p, size_t n, T f) {
    body_scale_float(p, n, f);
  }
  template <class T, class S>
  static void scale_int(T* p, size_t n, S f, S lo, S hi) {
    body_scale_int(p, n, f, lo, hi);
  }
  template <class H>
  static void scale_half(uint16_t* p, size_t n, float f) {
    body_scale_half<H>(p, n, f);
  }
};

#ifdef HS_REDUCE_AVX2
struct F16cFp16 {
  HS_TARGET_AVX2 static void to_float(const uint16_t* s, float* d, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; ++i) d[i] = half_to_float(s[i]);  // same bits as the instruction
  }
  HS_TARGET_AVX2 static void from_float(const float* s, uint16_t* d, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
    }
    for (; i < n; ++i) d[i] = float_to_half(s[i]);
  }
};

struct Avx2 {
  using Fp16 = F16cFp16;
  template <class T, class F>
  HS_TARGET_AVX2 static void distinct(T* d, const T* a, const T* b, size_t n, F f) {
    body_distinct(d, a, b, n, f);
  }
  template <class T, class F>
  HS_TARGET_AVX2 static void into_a(T* d, const T* b, size_t n, F f) {
    body_into_a(d, b, n, f);
  }
  template <class T, class F>
  HS_TARGET_AVX2 static void into_b(T* d, const T* a, size_t n, F f) {
    body_into_b(d, a, n, f);
  }
  template <class H, class F>
  HS_TARGET_AVX2 static void half(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n, F f) {
    body_half<H>(d, a, b, n, f);
  }
  template <class T>
  HS_TARGET_AVX2 static void scale_float(T* p, size_t n, T f) {
    body_scale_float(p, n, f);
  }
  template <class T, class S>
  HS_TARGET_AVX2 static void scale_int(T* p, size_t n, S f, S lo, S hi) {
    body_scale_int(p, n, f, lo, hi);
  }
  template <class H>
  HS_TARGET_AVX2 static void scale_half(uint16_t* p, size_t n, float f) {
    body_scale_half<H>(p, n, f);
  }
};

bool cpu_has_avx2_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return yes;
}
#endif

// ---- dispatch -------------------------------------------------------------------------------

bool overlaps(const void* x, const void* y, size_t bytes) {
  const auto px = reinterpret_cast<uintptr_t>(x), py = reinterpret_cast<uintptr_t>(y);
  return px < py + bytes && py < px + bytes;
}

// Picks the loop whose __restrict promises hold: the engine and transports mostly reduce into
// place (d == a) or into a third buffer. a == b or a partial overlap gets an unvectorised loop
// with plain element-by-element semantics.
template <class Isa, class T, class F>
void reduce_typed(void* dst, const void* a, const void* b, size_t n, F f) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  const size_t bytes = n * sizeof(T);
  const bool dx = overlaps(d, x, bytes), dy = overlaps(d, y, bytes);
  if (d == x && !dy) {
    Isa::into_a(d, y, n, f);
  } else if (d == y && !dx) {
    Isa::into_b(d, x, n, f);
  } else if (!dx && !dy) {
    Isa::distinct(d, x, y, n, f);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = f(x[i], y[i]);
  }
}

template <class Isa, class F>
void reduce_dtype(void* dst, const void* a, const void* b, size_t n, DataType dtype, F f) {
  auto* d16 = static_cast<uint16_t*>(dst);
  const auto* a16 = static_cast<const uint16_t*>(a);
  const auto* b16 = static_cast<const uint16_t*>(b);
  switch (dtype) {
    case DataType::kUInt8: return reduce_typed<Isa, uint8_t>(dst, a, b, n, f);
    case DataType::kInt8: return reduce_typed<Isa, int8_t>(dst, a, b, n, f);
    case DataType::kInt16: return reduce_typed<Isa, int16_t>(dst, a, b, n, f);
    case DataType::kUInt16: return reduce_typed<Isa, uint16_t>(dst, a, b, n, f);
    case DataType::kInt32: return reduce_typed<Isa, int32_t>(dst, a, b, n, f);
    case DataType::kInt64: return reduce_typed<Isa, int64_t>(dst, a, b, n, f);
    case DataType::kFloat16: return Isa::template half<typename Isa::Fp16>(d16, a16, b16, n, f);
    case DataType::kBFloat16: return Isa::template half<SoftBf16>(d16, a16, b16, n, f);
    case DataType::kFloat32: return reduce_typed<Isa, float>(dst, a, b, n, f);
    case DataType::kFloat64: return reduce_typed<Isa, double>(dst, a, b, n, f);
    case DataType::kBool: return reduce_typed<Isa, uint8_t>(dst, a, b, n, typename F::BoolOp{});
  }
  throw CollectiveError("reduce_buffers: unknown dtype code " + std::to_string(int(dtype)));
}

template <class Isa>
void reduce_isa(void* dst, const void* a, const void* b, size_t n, DataType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return reduce_dtype<Isa>(dst, a, b, n, dtype, SumOp{});
    case ReduceOp::kMin: return reduce_dtype<Isa>(dst, a, b, n, dtype, MinOp{});
    case ReduceOp::kMax: return reduce_dtype<Isa>(dst, a, b, n, dtype, MaxOp{});
    case ReduceOp::kProduct: return reduce_dtype<Isa>(dst, a, b, n, dtype, ProductOp{});
    default: break;
  }
  throw CollectiveError(std::string("reduce_buffers: op ") + reduce_op_name(op) +
                        " is not an element-wise reduction (Average is Sum then scale_buffer)");
}

// Bounds for the saturating integer scale: the extreme values of T that S can hold exactly
// (max(int32) and max(int64) themselves are not representable in float/double).
template <class T, class S>
void scale_int_bounds(S* lo, S* hi) {
  *lo = S(std::numeric_limits<T>::min());
  *hi = std::nextafter(S(std::numeric_limits<T>::max()) + S(1), S(0));
}

template <class Isa, class T, class S>
void scale_int_typed(void* buf, size_t n, S f) {
  S lo, hi;
  scale_int_bounds<T>(&lo, &hi);
  Isa::scale_int(static_cast<T*>(buf), n, f, lo, hi);
}

template <class Isa>
void scale_isa(void* buf, size_t n, DataType dtype, double factor) {
  const float ff = float(factor);
  auto* p16 = static_cast<uint16_t*>(buf);
  switch (dtype) {
    case DataType::kUInt8: return scale_int_typed<Isa, uint8_t>(buf, n, ff);
    case DataType::kInt8: return scale_int_typed<Isa, int8_t>(buf, n, ff);
    case DataType::kInt16: return scale_int_typed<Isa, int16_t>(buf, n, ff);
    case DataType::kUInt16: return scale_int_typed<Isa, uint16_t>(buf, n, ff);
    case DataType::kInt32: return scale_int_typed<Isa, int32_t>(buf, n, factor);
    case DataType::kInt64: return scale_int_typed<Isa, int64_t>(buf, n, factor);
    case DataType::kFloat16: return Isa::template scale_half<typename Isa::Fp16>(p16, n, ff);
    case DataType::kBFloat16: return Isa::template scale_half<SoftBf16>(p16, n, ff);
    case DataType::kFloat32: return Isa::scale_float(static_cast<float*>(buf), n, ff);
    case DataType::kFloat64: return Isa::scale_float(static_cast<double*>(buf), n, factor);
    case DataType::kBool:
      // 0/1 times factor, truncated toward zero: true stays true only if |factor| >= 1.
      if (std::fabs(ff) < 1.0f && n > 0) std::memset(buf, 0, n);  // (an empty buffer may be null)
      return;
  }
  throw CollectiveError("scale_buffer: unknown dtype code " + std::to_string(int(dtype)));
}

}  // namespace

void reduce_buffers(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
#ifdef HS_REDUCE_AVX2
  if (cpu_has_avx2_f16c()) return reduce_isa<Avx2>(dst, a, b, count, dtype, op);
#endif
  reduce_isa<Generic>(dst, a, b, count, dtype, op);
}

void scale_buffer(void* buf, size_t count, DataType dtype, double factor) {
  if (factor == 1.0) return;
  if (!dtype_is_float(dtype) && !std::isfinite(factor)) {
    throw CollectiveError(std::string("scale_buffer: non-finite factor ") + std::to_string(factor) +
                          " for integer dtype " + dtype_name(dtype));
  }
#ifdef HS_REDUCE_AVX2
  if (cpu_has_avx2_f16c()) return scale_isa<Avx2>(buf, count, dtype, factor);
#endif
  scale_isa<Generic>(buf, count, dtype, factor);
}

}  // namespace hs
