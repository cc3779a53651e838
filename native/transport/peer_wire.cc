#include "transport/peer_wire.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "common/errors.h"

namespace hs {
namespace peer_wire {

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (24 - 8 * i));
}

uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

void random_nonce(uint8_t* out) {
  size_t got = 0;
  while (got < kNonce) {
    ssize_t k = getrandom(out + got, kNonce - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) throw TransportError(std::string("getrandom() for a handshake nonce: ") + std::strerror(errno));
    got += static_cast<size_t>(k);
  }
}

Digest handshake_mac(const std::string& token, const char* label, const uint8_t* connector_nonce,
                     const uint8_t* acceptor_nonce, int rank, int channel, bool framed) {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(connector_nonce), kNonce);
  if (acceptor_nonce) msg.append(reinterpret_cast<const char*>(acceptor_nonce), kNonce);
  uint8_t ids[8];
  put_u32(ids, static_cast<uint32_t>(rank));
  put_u32(ids + 4, static_cast<uint32_t>(channel));
  msg.append(reinterpret_cast<const char*>(ids), sizeof ids);
  if (framed) msg.push_back('F');  // (plain links keep the greeting of releases without frames)
  return hmac_sha256(token, msg);
}

Digest frame_key(const std::string& token, const uint8_t* connector_nonce, const uint8_t* acceptor_nonce, int from,
                 int to, int channel) {
  std::string msg("frames");
  msg.append(reinterpret_cast<const char*>(connector_nonce), kNonce);
  msg.append(reinterpret_cast<const char*>(acceptor_nonce), kNonce);
  uint8_t ids[12];
  put_u32(ids, static_cast<uint32_t>(from));
  put_u32(ids + 4, static_cast<uint32_t>(to));
  put_u32(ids + 8, static_cast<uint32_t>(channel));
  msg.append(reinterpret_cast<const char*>(ids), sizeof ids);
  return hmac_sha256(token, msg);
}

}  // namespace peer_wire
}  // namespace hs
