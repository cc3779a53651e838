// float16 (IEEE binary16) and bfloat16 <-> float32 conversions, round-to-nearest-even, with
// inf/nan/subnormals. Written branch-free (selects, not ifs) so that the array versions below
// auto-vectorise with plain SSE2: the wheel targets baseline x86_64, so F16C cannot be assumed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hs {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  // Normal: move the fields into place and rebias the exponent from 15 to 127.
  const uint32_t normal = (em << 13) + (112u << 23);
  const uint32_t inf_nan = (em << 13) | 0x7f800000u;  // keeps the NaN payload
  // Subnormal or zero: the value is em * 2^-24 exactly; an int->float convert vectorises,
  // a count-leading-zeros renormalisation would not.
  const uint32_t subnormal = float_bits(float(int32_t(em)) * 5.9604644775390625e-8f);
  const uint32_t is_sub = 0u - uint32_t(em < 0x0400u);  // all ones or zero
  const uint32_t r = em >= 0x7c00u ? inf_nan : normal;
  // A mask, not ?:, for the float-derived value: GCC would otherwise move the float multiply
  // under a branch and then refuse to vectorise it (-ftrapping-math, the default).
  return bits_float(((subnormal & is_sub) | (r & ~is_sub)) | sign);
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  // Normal half: rebias, then round to nearest even at the 13 dropped mantissa bits (a carry
  // into the exponent is the correct result, up to and including overflow to inf).
  const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Below the smallest normal half (2^-14): adding 0.5f, whose ulp is 2^-24 (the half subnormal
  // step), makes the FPU do the round-to-nearest-even; the low mantissa bits are the result.
  const uint32_t subnormal = float_bits(bits_float(a) + 0.5f) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);  // quiet, top payload bits kept
  // |f| >= 65536 is inf (65520..65536 already rounds up to inf in `normal`).
  const uint32_t special = a > 0x7f800000u ? nan : 0x7c00u;
  // Masks, not ?:, wherever a float-derived value is selected: see half_to_float.
  const uint32_t is_sub = 0u - uint32_t(a < (113u << 23));
  const uint32_t is_special = 0u - uint32_t(a >= (143u << 23));
  const uint32_t finite = (subnormal & is_sub) | (normal & ~is_sub);
  return uint16_t(((special & is_special) | (finite & ~is_special)) | sign);
}

inline float bfloat16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

inline uint16_t float_to_bfloat16(float f) {
  const uint32_t x = float_bits(f);
  // Round to nearest even on the 16 dropped bits; overflow to inf is correct rounding.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40u;  // a NaN must not round to inf: force the quiet bit
  return uint16_t((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Array forms: src and dst must not overlap (that is what lets them vectorise).
inline void half_to_float(const uint16_t* __restrict src, float* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

inline void float_to_half(const float* __restrict src, uint16_t* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

inline void bfloat16_to_float(const uint16_t* __restrict src, float* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bfloat16_to_float(src[i]);
}

inline void float_to_bfloat16(const float* __restrict src, uint16_t* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
}

}  // namespace hs
