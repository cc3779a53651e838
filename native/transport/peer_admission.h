// Which connections to a rank's peer port get a hearing, so that no flood of other connections can
// keep the real peers out of hvd.init().
//
// A connection is read as soon as it is accepted: a real peer's greeting, which proves the job's
// secret, is normally there already and is answered at once. Connections whose greeting has not
// arrived wait, each for at most kPeerHandshakeMs, at most kMaxPendingPerAddress from one source
// address and kMaxPendingPeers in all; a newer connection pushes out the oldest one from its own
// address (or, when all are full, from the address holding the most), after one last read. A
// connection whose greeting proved the secret is never pushed out. A peer whose connection was
// pushed out before its greeting arrived connects again (peer_handshake.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "transport/peer_wire.h"

namespace hs {

constexpr int kMaxPendingPeers = 64;
constexpr int kMaxPendingPerAddress = 16;
// Time a connection accepted from the peer port has to complete its handshake.
constexpr int kPeerHandshakeMs = 10000;

// A connection that completed the handshake, with the nonces its link's keys derive from.
struct AdmittedPeer {
  int peer, channel, fd;
  uint8_t connector_nonce[peer_wire::kNonce];
  uint8_t acceptor_nonce[peer_wire::kNonce];
};

// Accepts connections on listen_fd until `expected` of them proved the token, calling
// take(admitted) for each; take returns false for a (peer, channel) it does not want
// (a duplicate), and that connection is closed. Peers must be ranks in (my_rank, size) and
// channels below num_channels. Throws TransportError after timeout_ms, naming the ranks still
// missing (missing_ranks(), each worded by describe()) and, per source address, the connections
// that never proved the secret and why. `framed` is this rank's HOROVOD_SPARK_DATA_PLANE_AUTH: a
// peer that proves the secret with the other value fails this call at once, naming the setting.
void accept_peers(int listen_fd, int my_rank, int size, int num_channels, const std::string& token, bool framed,
                  int expected, int timeout_ms, const std::function<bool(const AdmittedPeer&)>& take,
                  const std::function<std::vector<int>()>& missing_ranks,
                  const std::function<std::string(int)>& describe);

}  // namespace hs
