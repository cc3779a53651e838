// How ranks prove to each other that they belong to the same job before a peer port hands a
// connection to the transport. The job token (derived from the job's secret) never crosses the wire:
//
//   connector -> acceptor  Hello     magic, rank, channel, connector nonce,
//                                    HMAC(token, "hello" | connector nonce | rank | channel)
//   acceptor -> connector  Challenge acceptor nonce, HMAC(token, "acceptor" | both nonces | rank | channel)
//   connector -> acceptor  Proof     HMAC(token, "connector" | both nonces | rank | channel)
//
// The greeting proves the secret in the connector's first bytes, so the acceptor can tell its
// peers from anything else before it spends more than a read on a connection (peer_admission.h).
// A greeting copied from the wire proves nothing: the acceptor refuses a nonce it has seen, and
// the copier cannot answer the challenge. A connection the acceptor closes before answering (it
// was pushed out by a flood of other connections) is tried again until the start timeout.
#pragma once
#include <cstdint>
#include <string>

#include "transport/peer_wire.h"

namespace hs {

// A connection this rank opened to a lower rank, greeted but not yet proven.
struct OutgoingPeer {
  int fd = -1;
  int peer = -1;
  int channel = 0;
  std::string host;
  int port = 0;
  bool framed = false;  // HOROVOD_SPARK_DATA_PLANE_AUTH on this rank
  uint8_t nonce[peer_wire::kNonce] = {};
  uint8_t acceptor_nonce[peer_wire::kNonce] = {};  // once proven
};

// Connects to `peer` at host:port and sends the greeting for `channel`.
OutgoingPeer greet_peer(const std::string& host, int port, int my_rank, int peer, int channel, const std::string& token,
                        bool framed, int timeout_ms, const std::string& who);
// Reads the acceptor's challenge, checks it proves the token, and answers it; connects and greets
// again while the acceptor closes the connection unanswered. Throws TransportError naming `who`
// when the peer proves it is not of this job, or does not answer within timeout_ms.
void prove_to_peer(OutgoingPeer& out, int my_rank, const std::string& token, int timeout_ms, const std::string& who);

}  // namespace hs
