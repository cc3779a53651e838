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
#include <functional>
#include <string>
#include <vector>

namespace hs {

constexpr int kMaxPendingPeers = 64;
constexpr int kMaxPendingPerAddress = 16;
// Time a connection accepted from the peer port has to complete its handshake.
constexpr int kPeerHandshakeMs = 10000;

// Accepts connections on listen_fd until `expected` of them proved the token, calling
// take(peer, channel, fd) for each; take returns false for a (peer, channel) it does not want
// (a duplicate), and that connection is closed. Peers must be ranks in (my_rank, size) and
// channels below num_channels. Throws TransportError after timeout_ms, naming the ranks still
// missing (missing_ranks(), each worded by describe()) and, per source address, the connections
// that never proved the secret and why.
void accept_peers(int listen_fd, int my_rank, int size, int num_channels, const std::string& token, int expected,
                  int timeout_ms, const std::function<bool(int, int, int)>& take,
                  const std::function<std::vector<int>()>& missing_ranks,
                  const std::function<std::string(int)>& describe);

}  // namespace hs
