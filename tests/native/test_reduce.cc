// Checks the element kernels (common/half.h, common/reduce.cc) against independent scalar
// references, bit for bit: conversions (every float16, a sweep of float32), reduce_buffers for
// every dtype x op x aliasing pattern x awkward lengths (vector tails), and scale_buffer. The
// pytest builds this twice, once normally and once with -DHS_REDUCE_FORCE_GENERIC, so both the
// AVX2/F16C and the baseline SSE2 variants are held to the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "common/errors.h"
#include "common/half.h"
#include "common/reduce.h"

namespace {

using hs::DataType;
using hs::ReduceOp;

int g_failures = 0;
long g_checks = 0;

bool expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok && ++g_failures <= 40) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  return ok;
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// ---- conversions: references by arithmetic in double, not by bit tricks ---------------------

double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return s * std::ldexp(m, -24);
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * std::ldexp(1024 + m, e - 25);
}

// Round-to-nearest-even of |x| to a binary format with `mant` stored bits, exponent bias `bias`
// and largest exponent field `emax_field` (all-ones is inf); returns the bits without the sign.
uint32_t round_to_format(double a, int mant, int bias, int emax_field) {
  const int emin = 1 - bias;  // exponent of the smallest normal
  int e;
  std::frexp(a, &e);
  e -= 1;  // a = 1.f * 2^e
  if (a == 0) return 0;
  if (e < emin) e = emin;                              // subnormal: fixed quantum 2^(emin - mant)
  double q = std::nearbyint(std::ldexp(a, mant - e));  // default rounding: to nearest even
  if (q >= std::ldexp(1.0, mant + 1)) {                // rounded up to the next binade
    q /= 2;
    e += 1;
  }
  const bool normal = q >= std::ldexp(1.0, mant);
  const uint32_t field = normal ? uint32_t(e + bias) : 0;
  if (field >= uint32_t(emax_field)) return uint32_t(emax_field) << mant;  // overflow: inf
  return (field << mant) | (uint32_t(q) & ((1u << mant) - 1));
}

uint16_t ref_float_to_half(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isinf(f)) return sign | 0x7c00;
  return uint16_t(sign | round_to_format(std::fabs(double(f)), 10, 15, 31));
}

uint16_t ref_float_to_bf16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isinf(f)) return sign | 0x7f80;
  return uint16_t(sign | round_to_format(std::fabs(double(f)), 7, 127, 255));
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || hs::float_bits(a) == hs::float_bits(b); }

void test_conversions() {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = hs::half_to_float(uint16_t(h));
    const double want = half_value(uint16_t(h));
    if (!(std::isnan(want) ? std::isnan(got) : double(got) == want && std::signbit(got) == std::signbit(want))) ++bad;
    if (std::isnan(got) && hs::float_to_half(got) != (h | 0x200)) ++bad;  // NaN payload round trip
    if (!std::isnan(got) && hs::float_to_half(got) != h) ++bad;           // exact round trip
  }
  expect(bad == 0, "half_to_float / round trip: " + std::to_string(bad) + " mismatches");

  bad = 0;
  int bad_bf = 0;
  for (uint64_t x = 0; x < (1ull << 32); x += 251) {  // a sweep hitting every exponent
    const float f = hs::bits_float(uint32_t(x));
    const uint16_t h = hs::float_to_half(f), b = hs::float_to_bfloat16(f);
    if (std::isnan(f)) {
      bad += !std::isnan(hs::half_to_float(h));
      bad_bf += !std::isnan(hs::bfloat16_to_float(b));
    } else {
      bad += h != ref_float_to_half(f);
      bad_bf += b != ref_float_to_bf16(f);
    }
  }
  // Ties and the overflow edge, which a sparse sweep may miss.
  const float edges[] = {65504.0f,       65519.99f,      65520.0f,   65536.0f,       0x1p-25f,
                         0x1.8p-25f,     0x1p-24f,       0x1.8p-24f, 0x1.ffcp-15f,   0x1.ffep-15f,
                         1.00048828125f, 1.00146484375f, 3.0e38f,    0x1.fffffep127f};
  for (float f : edges) {
    for (float s : {f, -f}) {
      bad += hs::float_to_half(s) != ref_float_to_half(s);
      bad_bf += hs::float_to_bfloat16(s) != ref_float_to_bf16(s);
    }
  }
  expect(bad == 0, "float_to_half: " + std::to_string(bad) + " mismatches");
  expect(bad_bf == 0, "float_to_bfloat16: " + std::to_string(bad_bf) + " mismatches");
  expect(hs::float_to_half(1.0f) == 0x3c00 && hs::float_to_bfloat16(1.0f) == 0x3f80, "1.0 encodings");

  // The array forms (vectorised) must agree with the scalar forms, tails included.
  std::vector<uint16_t> h(1037), h2(1037);
  std::vector<float> f(1037);
  for (size_t i = 0; i < h.size(); ++i) h[i] = uint16_t(mix(i));
  hs::half_to_float(h.data(), f.data(), h.size());
  hs::float_to_half(f.data(), h2.data(), h.size());
  bad = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    bad += !same_float(f[i], hs::half_to_float(h[i]));
    bad += h2[i] != hs::float_to_half(f[i]);
  }
  hs::bfloat16_to_float(h.data(), f.data(), h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = f[i] * 1.00390625f;  // needs rounding back
  hs::float_to_bfloat16(f.data(), h2.data(), h.size());
  for (size_t i = 0; i < h.size(); ++i) bad += h2[i] != hs::float_to_bfloat16(f[i]);
  expect(bad == 0, "array conversions differ from scalar: " + std::to_string(bad));
}

// ---- reduce_buffers --------------------------------------------------------------------------

const DataType kTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kUInt16,  DataType::kInt16,
                           DataType::kInt32,   DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                           DataType::kFloat32, DataType::kFloat64, DataType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

template <class T>
T ref_float_op(ReduceOp op, T a, T b) {
  if (op == ReduceOp::kSum) return a + b;
  if (op == ReduceOp::kProduct) return a * b;
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
  if (op == ReduceOp::kMin) return b < a ? b : a;
  return a < b ? b : a;
}

template <class T>
T ref_int_op(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum: return T(U(uint64_t(a) + uint64_t(b)));
    case ReduceOp::kProduct: return T(U(uint64_t(a) * uint64_t(b)));
    case ReduceOp::kMin: return a < b ? a : b;
    default: return a < b ? b : a;
  }
}

// The expected bytes of one element of `a op b`.
void ref_element(DataType dt, ReduceOp op, const char* a, const char* b, char* out) {
  auto ld = [](const char* p, auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  auto st = [out](auto v) { std::memcpy(out, &v, sizeof v); };
  switch (dt) {
    case DataType::kUInt8: return st(ref_int_op(op, ld(a, uint8_t()), ld(b, uint8_t())));
    case DataType::kInt8: return st(ref_int_op(op, ld(a, int8_t()), ld(b, int8_t())));
    case DataType::kInt16: return st(ref_int_op(op, ld(a, int16_t()), ld(b, int16_t())));
    case DataType::kUInt16: return st(ref_int_op(op, ld(a, uint16_t()), ld(b, uint16_t())));
    case DataType::kInt32: return st(ref_int_op(op, ld(a, int32_t()), ld(b, int32_t())));
    case DataType::kInt64: return st(ref_int_op(op, ld(a, int64_t()), ld(b, int64_t())));
    case DataType::kFloat32: return st(ref_float_op(op, ld(a, float()), ld(b, float())));
    case DataType::kFloat64: return st(ref_float_op(op, ld(a, double()), ld(b, double())));
    case DataType::kFloat16:
      return st(hs::float_to_half(
          ref_float_op(op, hs::half_to_float(ld(a, uint16_t())), hs::half_to_float(ld(b, uint16_t())))));
    case DataType::kBFloat16:
      return st(hs::float_to_bfloat16(
          ref_float_op(op, hs::bfloat16_to_float(ld(a, uint16_t())), hs::bfloat16_to_float(ld(b, uint16_t())))));
    case DataType::kBool: {
      const bool x = ld(a, uint8_t()) != 0, y = ld(b, uint8_t()) != 0;
      const bool any = op == ReduceOp::kSum || op == ReduceOp::kMax;
      return st(uint8_t(any ? (x || y) : (x && y)));
    }
  }
}

bool is_nan_elem(DataType dt, const char* p) {
  uint16_t h;
  float f;
  double d;
  switch (dt) {
    case DataType::kFloat16: std::memcpy(&h, p, 2); return std::isnan(hs::half_to_float(h));
    case DataType::kBFloat16: std::memcpy(&h, p, 2); return std::isnan(hs::bfloat16_to_float(h));
    case DataType::kFloat32: std::memcpy(&f, p, 4); return std::isnan(f);
    case DataType::kFloat64: std::memcpy(&d, p, 8); return std::isnan(d);
    default: return false;
  }
}

// Random elements; for floats a quarter are specials (NaN, inf, zeros, subnormals, extremes).
std::vector<char> random_elems(DataType dt, size_t n, uint64_t seed) {
  const size_t es = hs::dtype_size(dt);
  std::vector<char> v(n * es);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = mix(seed * 7919 + i);
    char* p = v.data() + i * es;
    const double u = double(r >> 11) * 0x1p-53;
    const double specials[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-40, 3e-8, 70000.0, 1e300, -1.0};
    const double x = (r & 3) == 0 ? specials[(r >> 2) % 10] : (u * 2 - 1) * double(1 << ((r >> 5) % 8));
    switch (dt) {
      case DataType::kFloat16: {
        const uint16_t h = hs::float_to_half(float(x));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t h = hs::float_to_bfloat16(float(x));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kFloat32: {
        const float f = float(x);
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::kFloat64: std::memcpy(p, &x, 8); break;
      case DataType::kBool: {
        const uint8_t b = uint8_t((r >> 8) % 4 == 0 ? 0 : (r >> 8) % 4 == 1 ? 1 : (r >> 16));
        std::memcpy(p, &b, 1);
        break;
      }
      default: std::memcpy(p, &r, es);  // integers: every bit pattern, overflow included
    }
  }
  return v;
}

void test_reduce() {
  const size_t lengths[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 65, 1023, 1024, 1025, 2049, 4099};
  enum Alias { kDistinct, kIntoA, kIntoB, kSameInputs, kAllSame };
  const char* alias_name[] = {"distinct", "dst==a", "dst==b", "a==b", "dst==a==b"};
  for (DataType dt : kTypes) {
    const size_t es = hs::dtype_size(dt);
    for (ReduceOp op : kOps) {
      for (size_t n : lengths) {
        for (int alias = kDistinct; alias <= kAllSame; ++alias) {
          const uint64_t seed = uint64_t(dt) * 1000 + uint64_t(op) * 100 + n;
          std::vector<char> a = random_elems(dt, n, seed), b = random_elems(dt, n, seed + 1);
          if (alias == kSameInputs || alias == kAllSame) b = a;
          std::vector<char> want(n * es);
          for (size_t i = 0; i < n; ++i)
            ref_element(dt, op, a.data() + i * es, b.data() + i * es, want.data() + i * es);
          // Offset by one element inside a larger buffer: misaligned pointers, like the ring's.
          std::vector<char> da(a.size() + es), db(b.size() + es), dd(n * es + es, char(0x77));
          std::copy(a.begin(), a.end(), da.begin() + long(es));  // (memcpy may not take an empty vector's null)
          std::copy(b.begin(), b.end(), db.begin() + long(es));
          char* pa = da.data() + es;
          char* pb = db.data() + es;
          char* pd = dd.data() + es;
          if (alias == kIntoA || alias == kAllSame) pd = pa;
          if (alias == kIntoB) pd = pb;
          if (alias == kAllSame) pb = pa;
          if (alias == kSameInputs) pb = pa;
          hs::reduce_buffers(pd, pa, pb, n, dt, op);
          size_t bad = 0;
          for (size_t i = 0; i < n; ++i) {
            const char* g = pd + i * es;
            const char* w = want.data() + i * es;
            const bool ok = std::memcmp(g, w, es) == 0 || (is_nan_elem(dt, g) && is_nan_elem(dt, w));
            bad += !ok;
          }
          expect(bad == 0, std::string("reduce_buffers ") + hs::dtype_name(dt) + " " + hs::reduce_op_name(op) +
                               " n=" + std::to_string(n) + " " + alias_name[alias] + ": " + std::to_string(bad) +
                               " wrong elements");
          if (alias == kDistinct) expect(dd[0] == char(0x77), "reduce_buffers wrote before dst");
        }
      }
    }
  }
  for (ReduceOp op : {ReduceOp::kAverage, ReduceOp::kAdasum}) {
    float x = 1, y = 2;
    bool threw = false;
    try {
      hs::reduce_buffers(&x, &x, &y, 1, DataType::kFloat32, op);
    } catch (const hs::CollectiveError&) {
      threw = true;
    }
    expect(threw, std::string("reduce_buffers must reject ") + hs::reduce_op_name(op));
  }
}

// ---- scale_buffer ----------------------------------------------------------------------------

template <class T, class S>
T ref_scale_int(T x, S f) {
  S v = S(x) * f;
  const S lo = S(std::numeric_limits<T>::min());
  const S hi = std::nextafter(S(std::numeric_limits<T>::max()) + S(1), S(0));
  v = v < lo ? lo : v > hi ? hi : v;
  return T(std::trunc(v));
}

void test_scale() {
  const double factors[] = {1.0, 0.5, 1.0 / 3, 0.25, -2.0, 2.0, 300.0, 1e-3};
  for (DataType dt : kTypes) {
    const size_t es = hs::dtype_size(dt);
    for (double f : factors) {
      for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(1030)}) {
        std::vector<char> buf = random_elems(dt, n, uint64_t(dt) * 31 + n);
        if (dt == DataType::kBool)
          for (auto& c : buf) c = c != 0;
        const std::vector<char> orig = buf;
        hs::scale_buffer(buf.data(), n, dt, f);
        size_t bad = 0;
        const float ff = float(f);
        for (size_t i = 0; i < n; ++i) {
          const char* p = orig.data() + i * es;
          char want[8];
          auto ld = [p](auto v) {
            std::memcpy(&v, p, sizeof v);
            return v;
          };
          auto st = [&want](auto v) { std::memcpy(want, &v, sizeof v); };
          std::memcpy(want, p, es);  // factor 1 is documented as a no-op
          if (f != 1.0) switch (dt) {
              case DataType::kUInt8: st(ref_scale_int(ld(uint8_t()), ff)); break;
              case DataType::kInt8: st(ref_scale_int(ld(int8_t()), ff)); break;
              case DataType::kInt16: st(ref_scale_int(ld(int16_t()), ff)); break;
              case DataType::kUInt16: st(ref_scale_int(ld(uint16_t()), ff)); break;
              case DataType::kInt32: st(ref_scale_int(ld(int32_t()), f)); break;
              case DataType::kInt64: st(ref_scale_int(ld(int64_t()), f)); break;
              case DataType::kFloat16: st(hs::float_to_half(hs::half_to_float(ld(uint16_t())) * ff)); break;
              case DataType::kBFloat16: st(hs::float_to_bfloat16(hs::bfloat16_to_float(ld(uint16_t())) * ff)); break;
              case DataType::kFloat32: st(ld(float()) * ff); break;
              case DataType::kFloat64: st(ld(double()) * f); break;
              case DataType::kBool: st(uint8_t(ld(uint8_t()) != 0 && std::fabs(ff) >= 1.0f)); break;
            }
          const char* g = buf.data() + i * es;
          bad += !(std::memcmp(g, want, es) == 0 || (is_nan_elem(dt, g) && is_nan_elem(dt, want)));
        }
        expect(bad == 0, std::string("scale_buffer ") + hs::dtype_name(dt) + " factor=" + std::to_string(f) +
                             " n=" + std::to_string(n) + ": " + std::to_string(bad) + " wrong elements");
      }
    }
  }
}

}  // namespace

int main() {
  test_conversions();
  test_reduce();
  test_scale();
  std::printf("%ld checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
