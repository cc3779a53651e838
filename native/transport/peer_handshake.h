// How ranks prove to each other that they belong to the same job before a peer port hands a
// connection to the transport. The job token (derived from the job's secret) never crosses the wire:
//
//   connector -> acceptor  Hello     magic, rank, channel, connector nonce
//   acceptor -> connector  Challenge acceptor nonce, HMAC(token, "acceptor" | both nonces | rank | channel)
//   connector -> acceptor  Proof     HMAC(token, "connector" | both nonces | rank | channel)
//
// The acceptor reads every new connection's fixed-size messages without blocking on any one of
// them, gives each a short deadline, keeps at most kMaxPendingPeers unproven connections (a newer
// one pushes the oldest out), and so a silent or hostile connection never delays the real peers.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace hs {

constexpr int kMaxPendingPeers = 64;
// Time a connection accepted from the peer port has to complete its handshake.
constexpr int kPeerHandshakeMs = 10000;

// A connection this rank opened to a lower rank, greeted but not yet proven.
struct OutgoingPeer {
  int fd = -1;
  int peer = -1;
  int channel = 0;
  uint8_t nonce[16] = {};
};

// Connects to `peer` at host:port and sends the greeting for `channel`.
OutgoingPeer greet_peer(const std::string& host, int port, int my_rank, int peer, int channel, int timeout_ms,
                        const std::string& who);
// Reads the acceptor's challenge, checks it proves the token, and answers it. Throws TransportError
// naming `who` when the peer does not prove it belongs to the job.
void prove_to_peer(const OutgoingPeer& out, int my_rank, const std::string& token, int timeout_ms,
                   const std::string& who);

// Accepts connections on listen_fd until `expected` of them proved the token, calling
// take(peer, channel, fd) for each; take returns false for a (peer, channel) it does not want
// (a duplicate), and that connection is closed. Peers must be ranks in (my_rank, size) and
// channels below num_channels. Throws TransportError after timeout_ms, naming the ranks still
// missing (`missing()` describes them) and the connections that were refused and why.
void accept_peers(int listen_fd, int my_rank, int size, int num_channels, const std::string& token, int expected,
                  int timeout_ms, const std::function<bool(int, int, int)>& take,
                  const std::function<std::string()>& missing);

}  // namespace hs
