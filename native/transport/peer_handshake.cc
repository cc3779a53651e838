#include "transport/peer_handshake.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/errors.h"
#include "transport/socket_util.h"

namespace hs {

using namespace peer_wire;

namespace {
using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point t) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

void send_greeting(OutgoingPeer& out, int my_rank, const std::string& token, int timeout_ms, const std::string& who) {
  random_nonce(out.nonce);
  out.fd = tcp_connect(out.host, out.port, timeout_ms);
  uint8_t hello[kHello];
  put_u32(hello, kMagic);
  put_u32(hello + 4, static_cast<uint32_t>(my_rank));
  put_u32(hello + 8, static_cast<uint32_t>(out.channel));
  std::memcpy(hello + 12, out.nonce, kNonce);
  Digest mac = handshake_mac(token, "hello", out.nonce, nullptr, my_rank, out.channel, out.framed);
  std::memcpy(hello + 12 + kNonce, mac.data(), kMac);
  try {
    send_all(out.fd, hello, sizeof hello, timeout_ms, "greeting " + who);
  } catch (...) {
    ::close(out.fd);
    out.fd = -1;
    throw;
  }
}

enum class Answer { kComplete, kClosed, kTimedOut };

// Reads up to n bytes until they are all there, the peer closes (or resets) the connection, or the
// deadline passes; *got says how many arrived.
Answer read_answer(int fd, uint8_t* buf, size_t n, size_t* got, Clock::time_point deadline) {
  *got = 0;
  while (*got < n) {
    ssize_t k = recv(fd, buf + *got, n - *got, MSG_DONTWAIT);
    if (k > 0) {
      *got += static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return Answer::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Answer::kClosed;  // ECONNRESET and the like
    pollfd p{fd, POLLIN, 0};
    int ms = ms_until(deadline);
    if (ms == 0) return Answer::kTimedOut;
    if (poll(&p, 1, ms) < 0 && errno != EINTR)
      throw TransportError(std::string("poll() during the peer handshake: ") + std::strerror(errno));
  }
  return Answer::kComplete;
}
}  // namespace

OutgoingPeer greet_peer(const std::string& host, int port, int my_rank, int peer, int channel, const std::string& token,
                        bool framed, int timeout_ms, const std::string& who) {
  OutgoingPeer out;
  out.framed = framed;
  out.peer = peer;
  out.channel = channel;
  out.host = host;
  out.port = port;
  send_greeting(out, my_rank, token, timeout_ms, who);
  return out;
}

void prove_to_peer(OutgoingPeer& out, int my_rank, const std::string& token, int timeout_ms, const std::string& who) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  int pushed_out = 0, dropped = 0;
  for (int attempt = 0;; ++attempt) {
    uint8_t challenge[kChallenge];
    size_t got = 0;
    Answer answer = read_answer(out.fd, challenge, sizeof challenge, &got, deadline);
    if (answer == Answer::kComplete) {
      Digest expected = handshake_mac(token, "acceptor", out.nonce, challenge, my_rank, out.channel, out.framed);
      if (!digests_equal(expected.data(), challenge + kNonce, kMac))
        throw TransportError("the process listening at " + who +
                             "'s address did not prove it belongs to this job "
                             "(another job's rank, or a stale address): refusing to connect");
      Digest proof = handshake_mac(token, "connector", out.nonce, challenge, my_rank, out.channel, out.framed);
      send_all(out.fd, proof.data(), proof.size(), ms_until(deadline) + 1000, "proving this rank to " + who);
      std::memcpy(out.acceptor_nonce, challenge, kNonce);
      return;
    }
    const int waited_s =
        static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count());
    if (answer == Answer::kTimedOut)
      throw TransportError("timed out after " + std::to_string(waited_s) + " s waiting for " + who +
                           " to answer our handshake (" + who +
                           " answers once it has connected to the ranks below it: one of them may be stuck)");
    if (got == 1 && challenge[0] == kRefusedMode)
      throw TransportError(who + " refused this rank's connection: " + kModeSetting + " is " +
                           (out.framed ? "on" : "off") + " on this rank and " + (out.framed ? "off" : "on") + " on " +
                           who + "; set it alike on every rank (the launchers pass the driver's value on)");
    if (got == 1 && challenge[0] == kRefusedSecret)
      throw TransportError(who + " refused this rank's proof of the job's secret: the process listening at its " +
                           "address belongs to another job (another job's rank, or a stale address)");
    // Closed unanswered: pushed out by other connections to its peer port, or a duplicate.
    (got == 1 && challenge[0] == kRefusedBusy ? pushed_out : dropped) += 1;
    ::close(out.fd);
    out.fd = -1;
    auto pause = std::chrono::milliseconds(std::min(500, 10 << std::min(attempt, 6)));
    if (Clock::now() + pause >= deadline)
      throw TransportError(who + " closed this rank's connection " + std::to_string(pushed_out + dropped) +
                           " time(s) before answering its handshake (" + std::to_string(pushed_out) +
                           " pushed out to make room for other connections) within " + std::to_string(waited_s) +
                           " s: its peer port is flooded by connections that do not belong to the job (" + who +
                           "'s own error names where they come from)");
    std::this_thread::sleep_for(pause);
    send_greeting(out, my_rank, token, std::max(1, ms_until(deadline)), who);
  }
}

}  // namespace hs
