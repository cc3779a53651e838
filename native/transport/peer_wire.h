// The peer handshake's messages (see peer_handshake.h for the exchange), shared by the side that
// connects and the side that accepts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/hmac_sha256.h"

namespace hs {
namespace peer_wire {

constexpr uint32_t kMagic = 0x48535033;  // "HSP3": the greeting carries a MAC
constexpr size_t kNonce = 16;
constexpr size_t kMac = 32;
constexpr size_t kHello = 12 + kNonce + kMac;  // magic, rank, channel, connector nonce, MAC
constexpr size_t kChallenge = kNonce + kMac;   // acceptor nonce, MAC
constexpr size_t kProof = kMac;

// The single byte an acceptor may send before it closes a connection it will not complete. It is
// not authenticated: the connector uses it only to word its error and to decide whether to retry.
enum Refusal : uint8_t {
  kRefusedBusy = 'B',     // pushed out to make room for newer connections, or out of time: retry
  kRefusedSecret = 'S',   // the greeting's MAC is wrong: another job's secret, do not retry
  kRefusedDuplicate = 'D', // that rank's channel is already connected, or the nonce was used before
  kRefusedMode = 'M'        // the greeting proved the secret with the other data-plane mode: do not retry
};

void put_u32(uint8_t* p, uint32_t v);
uint32_t get_u32(const uint8_t* p);
// Fills kNonce bytes from the operating system's random source.
void random_nonce(uint8_t* out);
// HMAC(token, label | connector nonce | acceptor nonce | rank | channel [| 'F']); the greeting's
// MAC has no acceptor nonce (nullptr). 'F' is there when the sender's HOROVOD_SPARK_DATA_PLANE_AUTH
// is on, so
// two ranks that disagree on it cannot complete a handshake (and the acceptor can tell why).
Digest handshake_mac(const std::string& token, const char* label, const uint8_t* connector_nonce,
                     const uint8_t* acceptor_nonce, int rank, int channel, bool framed);
// The key of one direction of an authenticated link (tcp_link.h): HMAC(token, "frames" | both
// handshake nonces | sending rank | receiving rank | channel). The nonces make every connection's
// keys new, so frames recorded from an earlier connection of the same job fail as well.
Digest frame_key(const std::string& token, const uint8_t* connector_nonce, const uint8_t* acceptor_nonce, int from,
                 int to, int channel);
// The words an error uses for the setting, and for a rank's value of it.
constexpr const char* kModeSetting = "HOROVOD_SPARK_DATA_PLANE_AUTH";

}  // namespace peer_wire
}  // namespace hs
