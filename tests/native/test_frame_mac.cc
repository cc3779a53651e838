// Checks ChaCha20 and Poly1305 (common/frame_mac.h) against the test vectors of RFC 8439
// (sections 2.3.2, 2.5.2, 2.6.2 and appendix A.3's edge cases of the modular reduction), that
// feeding Poly1305 in pieces gives the one-shot tag, and measures Poly1305's throughput.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/frame_mac.h"

namespace {

int g_failures = 0;
int g_checks = 0;

std::vector<uint8_t> hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
  return out;
}

void expect_bytes(const uint8_t* got, const std::vector<uint8_t>& want, const std::string& what) {
  ++g_checks;
  if (std::memcmp(got, want.data(), want.size()) != 0) {
    ++g_failures;
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

std::vector<uint8_t> repeat(uint8_t b, size_t n) { return std::vector<uint8_t>(n, b); }

std::vector<uint8_t> cat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

void poly_case(const std::vector<uint8_t>& r, const std::vector<uint8_t>& s, const std::vector<uint8_t>& msg,
               const std::string& tag, const std::string& what) {
  std::vector<uint8_t> key = cat({r, s});
  uint8_t out[hs::kPolyTag];
  hs::Poly1305 mac(key.data());
  mac.update(msg.data(), msg.size());
  mac.finish(out);
  expect_bytes(out, hex(tag), what);
}

void rfc_vectors() {
  // 2.3.2: the ChaCha20 block function.
  std::vector<uint8_t> key(32);
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(i);
  uint8_t block[64];
  hs::chacha20_block(key.data(), 1, hex("000000090000004a00000000").data(), block);
  expect_bytes(block,
               hex("10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
                   "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"),
               "RFC 8439 2.3.2 ChaCha20 block");
  // 2.5.2: Poly1305 of "Cryptographic Forum Research Group".
  const std::string text = "Cryptographic Forum Research Group";
  poly_case(hex("85d6be7857556d337f4452fe42d506a8"), hex("0103808afb0db2fd4abff6af4149f51b"),
            std::vector<uint8_t>(text.begin(), text.end()), "a8061dc1305136c6c22b8baf0c0127a9", "RFC 8439 2.5.2");
  // 2.6.2: the one-time key from ChaCha20.
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(0x80 + i);
  uint8_t one_time[hs::kPolyKey];
  hs::poly1305_key_gen(key.data(), hex("000000000001020304050607").data(), one_time);
  expect_bytes(one_time, hex("8ad5a08b905f81cc815040274ab29471a833b637e3fd0da508dbb8e2fdd1a646"), "RFC 8439 2.6.2");
  // A.3: values that exercise the carries and the final reduction.
  const auto zero = repeat(0, 16), two = cat({{2}, repeat(0, 15)}), one = cat({{1}, repeat(0, 15)});
  poly_case(zero, zero, repeat(0, 64), "00000000000000000000000000000000", "A.3 #1");
  poly_case(two, zero, repeat(0xff, 16), "03000000000000000000000000000000", "A.3 #5");
  poly_case(two, repeat(0xff, 16), two, "03000000000000000000000000000000", "A.3 #6");
  poly_case(one, zero, cat({repeat(0xff, 16), {0xf0}, repeat(0xff, 15), {0x11}, repeat(0, 15)}),
            "05000000000000000000000000000000", "A.3 #7");
  poly_case(one, zero, cat({repeat(0xff, 16), {0xfb}, repeat(0xfe, 15), repeat(1, 16)}),
            "00000000000000000000000000000000", "A.3 #8");
  poly_case(two, zero, cat({{0xfd}, repeat(0xff, 15)}), "faffffffffffffffffffffffffffffff", "A.3 #9");
  const auto r10 = hex("01000000000000000400000000000000");
  const auto m10 =
      hex("e33594d7505e43b900000000000000003394d7505e4379cd0100000000000000"
          "0000000000000000000000000000000001000000000000000000000000000000");
  poly_case(r10, zero, m10, "14000000000000005500000000000000", "A.3 #10");
  poly_case(r10, zero, std::vector<uint8_t>(m10.begin(), m10.begin() + 48), "13000000000000000000000000000000",
            "A.3 #11");
}

void pieces_match_one_shot() {
  std::vector<uint8_t> key(32), msg(1000);
  uint32_t x = 12345;
  for (auto& b : key) b = static_cast<uint8_t>(x = x * 1103515245 + 12345);
  for (auto& b : msg) b = static_cast<uint8_t>(x = x * 1103515245 + 12345);
  for (size_t len : {0, 1, 15, 16, 17, 33, 999, 1000}) {
    uint8_t whole[16], split[16];
    hs::Poly1305 a(key.data());
    a.update(msg.data(), len);
    a.finish(whole);
    hs::Poly1305 b(key.data());
    for (size_t off = 0, step = 1; off < len; off += step, step = step * 3 % 23 + 1)
      b.update(msg.data() + off, std::min(step, len - off));
    b.finish(split);
    ++g_checks;
    if (std::memcmp(whole, split, 16) != 0) {
      ++g_failures;
      std::fprintf(stderr, "FAIL: Poly1305 in pieces differs from one shot at length %zu\n", len);
    }
  }
}

void throughput() {
  std::vector<uint8_t> key(32, 7), frame(256 << 10, 1);
  uint8_t tag[16];
  const int rounds = 400;  // 100 MiB
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    uint8_t one_time[32], nonce[12] = {};
    nonce[4] = static_cast<uint8_t>(i);
    hs::poly1305_key_gen(key.data(), nonce, one_time);
    hs::Poly1305 mac(one_time);
    mac.update(frame.data(), frame.size());
    mac.finish(tag);
    frame[0] ^= tag[0];
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ChaCha20-Poly1305 MAC: %.2f GB/s over 256 KiB frames (one core)\n",
              double(rounds) * frame.size() / s / 1e9);
}

}  // namespace

int main() {
  rfc_vectors();
  pieces_match_one_shot();
  throughput();
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
