// ChaCha20 (RFC 8439 section 2.3) and Poly1305 (section 2.5), used together as a MAC only
// (section 2.6: each message's one-time Poly1305 key is the first 32 bytes of the ChaCha20 block
// with counter 0 under the message's nonce). Nothing is encrypted: the data plane needs integrity,
// and leaving the payload in the clear keeps the receiver's in-place reductions free of a pass.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hs {

constexpr size_t kChachaKey = 32;
constexpr size_t kChachaNonce = 12;
constexpr size_t kPolyKey = 32;
constexpr size_t kPolyTag = 16;

// One 64-byte ChaCha20 block of key, nonce and block counter.
void chacha20_block(const uint8_t key[kChachaKey], uint32_t counter, const uint8_t nonce[kChachaNonce],
                    uint8_t out[64]);

// Poly1305 over data given in any number of pieces.
class Poly1305 {
 public:
  explicit Poly1305(const uint8_t key[kPolyKey]);
  void update(const uint8_t* p, size_t n);
  void finish(uint8_t tag[kPolyTag]);

 private:
  void blocks(const uint8_t* p, size_t n, uint64_t hibit);
  uint64_t r0_, r1_, s1_;   // the clamped multiplier, and 5/4 of its upper half
  uint64_t h0_ = 0, h1_ = 0, h2_ = 0;  // the accumulator, below 2^130 plus a little
  uint64_t pad0_, pad1_;    // s, added at the end
  uint8_t tail_[16];
  size_t tail_len_ = 0;
};

// The one-time Poly1305 key of RFC 8439 section 2.6.
void poly1305_key_gen(const uint8_t key[kChachaKey], const uint8_t nonce[kChachaNonce], uint8_t out[kPolyKey]);

}  // namespace hs
