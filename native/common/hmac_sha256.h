// HMAC-SHA256 (FIPS 180-4, RFC 2104) for the peer-port handshake, so the core needs no crypto library.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hs {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const uint8_t* data, size_t n);
Digest hmac_sha256(const std::string& key, const std::string& message);
// Compares in time independent of where the digests differ.
bool digests_equal(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace hs
