#include "common/frame_mac.h"

#include <algorithm>
#include <cstring>

namespace hs {

namespace {
inline uint32_t load32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t load64(const uint8_t* p) { return uint64_t(load32(p)) | uint64_t(load32(p + 4)) << 32; }
inline void store32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void store64(uint8_t* p, uint64_t v) {
  store32(p, uint32_t(v));
  store32(p + 4, uint32_t(v >> 32));
}
inline uint32_t rotl(uint32_t v, int n) { return v << n | v >> (32 - n); }
inline void quarter(uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d) {
  a += b;
  d ^= a;
  d = rotl(d, 16);
  c += d;
  b ^= c;
  b = rotl(b, 12);
  a += b;
  d ^= a;
  d = rotl(d, 8);
  c += d;
  b ^= c;
  b = rotl(b, 7);
}
using u128 = unsigned __int128;
}  // namespace

void chacha20_block(const uint8_t key[kChachaKey], uint32_t counter, const uint8_t nonce[kChachaNonce],
                    uint8_t out[64]) {
  uint32_t in[16] = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574};  // "expand 32-byte k"
  for (int i = 0; i < 8; ++i) in[4 + i] = load32(key + 4 * i);
  in[12] = counter;
  for (int i = 0; i < 3; ++i) in[13 + i] = load32(nonce + 4 * i);
  uint32_t x[16];
  std::memcpy(x, in, sizeof x);
  for (int round = 0; round < 10; ++round) {  // 20 rounds: a column round and a diagonal round each
    quarter(x[0], x[4], x[8], x[12]);
    quarter(x[1], x[5], x[9], x[13]);
    quarter(x[2], x[6], x[10], x[14]);
    quarter(x[3], x[7], x[11], x[15]);
    quarter(x[0], x[5], x[10], x[15]);
    quarter(x[1], x[6], x[11], x[12]);
    quarter(x[2], x[7], x[8], x[13]);
    quarter(x[3], x[4], x[9], x[14]);
  }
  for (int i = 0; i < 16; ++i) store32(out + 4 * i, x[i] + in[i]);
}

void poly1305_key_gen(const uint8_t key[kChachaKey], const uint8_t nonce[kChachaNonce], uint8_t out[kPolyKey]) {
  uint8_t block[64];
  chacha20_block(key, 0, nonce, block);
  std::memcpy(out, block, kPolyKey);
}

Poly1305::Poly1305(const uint8_t key[kPolyKey]) {
  // Clamping clears the low two bits of r's upper half, so r1 * 2^128 = (r1 / 4) * 2^130, which
  // is (r1 / 4) * 5 modulo 2^130 - 5: that is s1.
  r0_ = load64(key) & 0x0ffffffc0fffffffull;
  r1_ = load64(key + 8) & 0x0ffffffc0ffffffcull;
  s1_ = r1_ + (r1_ >> 2);
  pad0_ = load64(key + 16);
  pad1_ = load64(key + 24);
}

void Poly1305::blocks(const uint8_t* p, size_t n, uint64_t hibit) {
  uint64_t h0 = h0_, h1 = h1_, h2 = h2_;
  const uint64_t r0 = r0_, r1 = r1_, s1 = s1_;
  for (; n >= 16; p += 16, n -= 16) {
    u128 t = u128(h0) + load64(p);
    h0 = uint64_t(t);
    t = u128(h1) + load64(p + 8) + uint64_t(t >> 64);
    h1 = uint64_t(t);
    h2 += hibit + uint64_t(t >> 64);
    // h * r modulo 2^130 - 5, with the terms at 2^128 and above folded down through s1.
    u128 d0 = u128(h0) * r0 + u128(h1) * s1;
    u128 d1 = u128(h0) * r1 + u128(h1) * r0 + u128(h2) * s1 + uint64_t(d0 >> 64);
    uint64_t d2 = h2 * r0 + uint64_t(d1 >> 64);
    h0 = uint64_t(d0);
    h1 = uint64_t(d1);
    // Bits from 2^130 up are worth 5 each time round.
    uint64_t c = (d2 >> 2) * 5;
    h2 = d2 & 3;
    t = u128(h0) + c;
    h0 = uint64_t(t);
    t = u128(h1) + uint64_t(t >> 64);
    h1 = uint64_t(t);
    h2 += uint64_t(t >> 64);
  }
  h0_ = h0;
  h1_ = h1;
  h2_ = h2;
}

void Poly1305::update(const uint8_t* p, size_t n) {
  if (tail_len_) {
    size_t k = std::min(n, 16 - tail_len_);
    std::memcpy(tail_ + tail_len_, p, k);
    tail_len_ += k;
    p += k;
    n -= k;
    if (tail_len_ < 16) return;
    blocks(tail_, 16, 1);
    tail_len_ = 0;
  }
  size_t whole = n & ~size_t(15);
  blocks(p, whole, 1);
  std::memcpy(tail_, p + whole, n - whole);
  tail_len_ = n - whole;
}

void Poly1305::finish(uint8_t tag[kPolyTag]) {
  if (tail_len_) {  // the last, short block: a 1 after its bytes instead of at 2^128
    tail_[tail_len_] = 1;
    std::memset(tail_ + tail_len_ + 1, 0, 15 - tail_len_);
    blocks(tail_, 16, 0);
    tail_len_ = 0;
  }
  uint64_t h0 = h0_, h1 = h1_, h2 = h2_;
  // Fully reduce: h is below 2^131, so folding once and subtracting p at most once suffices.
  uint64_t c = (h2 >> 2) * 5;
  h2 &= 3;
  u128 t = u128(h0) + c;
  h0 = uint64_t(t);
  t = u128(h1) + uint64_t(t >> 64);
  h1 = uint64_t(t);
  h2 += uint64_t(t >> 64);
  // g = h + 5 - 2^130; keep it when it is not negative (h >= p), without branching on secrets.
  t = u128(h0) + 5;
  uint64_t g0 = uint64_t(t);
  t = u128(h1) + uint64_t(t >> 64);
  uint64_t g1 = uint64_t(t);
  uint64_t g2 = h2 + uint64_t(t >> 64);
  uint64_t keep_g = 0 - (g2 >> 2);  // all ones when g reached 2^130
  h0 = (h0 & ~keep_g) | (g0 & keep_g);
  h1 = (h1 & ~keep_g) | (g1 & keep_g);
  t = u128(h0) + pad0_;
  h0 = uint64_t(t);
  h1 = h1 + pad1_ + uint64_t(t >> 64);
  store64(tag, h0);
  store64(tag + 8, h1);
}

}  // namespace hs
