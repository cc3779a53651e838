#include "transport/peer_handshake.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "common/hmac_sha256.h"
#include "transport/socket_util.h"

namespace hs {

namespace {
using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x48535032;  // "HSP2"
constexpr size_t kNonce = 16;
constexpr size_t kHello = 12 + kNonce;
constexpr size_t kChallenge = kNonce + 32;
constexpr size_t kProof = 32;
constexpr size_t kRefusalsShown = 4;

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
                     const uint8_t* acceptor_nonce, int rank, int channel) {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(connector_nonce), kNonce);
  msg.append(reinterpret_cast<const char*>(acceptor_nonce), kNonce);
  uint8_t ids[8];
  put_u32(ids, static_cast<uint32_t>(rank));
  put_u32(ids + 4, static_cast<uint32_t>(channel));
  msg.append(reinterpret_cast<const char*>(ids), sizeof ids);
  return hmac_sha256(token, msg);
}

std::string peer_name(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  char text[INET_ADDRSTRLEN] = "?";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
}

struct Pending {
  int fd;
  std::string from;
  Clock::time_point accepted, deadline;
  bool proving = false;  // greeting read and challenge sent; waiting for the proof
  uint8_t buf[kHello > kProof ? kHello : kProof] = {};
  size_t got = 0;
  int peer = -1, channel = -1;
  uint8_t connector_nonce[kNonce] = {}, acceptor_nonce[kNonce] = {};
};

// The reasons connections were turned away, for the error should the real peers never arrive.
struct Refusals {
  size_t count = 0;
  std::vector<std::string> shown;
  void note(const std::string& why) {
    if (count++ < kRefusalsShown) shown.push_back(why);
  }
  std::string describe() const {
    if (count == 0) return "";
    std::string s = "; " + std::to_string(count) + " connection(s) to the peer port were refused meanwhile (";
    for (size_t i = 0; i < shown.size(); ++i) s += (i ? "; " : "") + shown[i];
    return s + (count > shown.size() ? "; ...)" : ")");
  }
};

void set_blocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); }
}  // namespace

OutgoingPeer greet_peer(const std::string& host, int port, int my_rank, int peer, int channel, int timeout_ms,
                        const std::string& who) {
  OutgoingPeer out;
  out.peer = peer;
  out.channel = channel;
  random_nonce(out.nonce);
  out.fd = tcp_connect(host, port, timeout_ms);
  uint8_t hello[kHello];
  put_u32(hello, kMagic);
  put_u32(hello + 4, static_cast<uint32_t>(my_rank));
  put_u32(hello + 8, static_cast<uint32_t>(channel));
  std::memcpy(hello + 12, out.nonce, kNonce);
  try {
    send_all(out.fd, hello, sizeof hello, timeout_ms, "greeting " + who);
  } catch (...) {
    ::close(out.fd);
    throw;
  }
  return out;
}

void prove_to_peer(const OutgoingPeer& out, int my_rank, const std::string& token, int timeout_ms,
                   const std::string& who) {
  uint8_t challenge[kChallenge];
  try {
    recv_all(out.fd, challenge, sizeof challenge, timeout_ms, "waiting for " + who + " to answer our handshake");
  } catch (const TransportError& e) {
    throw TransportError(std::string(e.what()) + " (" + who +
                         " must accept connections from this rank; a peer "
                         "that refuses our proof holds another job's secret)");
  }
  const uint8_t* acceptor_nonce = challenge;
  Digest expected = handshake_mac(token, "acceptor", out.nonce, acceptor_nonce, my_rank, out.channel);
  if (!digests_equal(expected.data(), challenge + kNonce, 32))
    throw TransportError("the process listening at " + who +
                         "'s address did not prove it belongs to this job "
                         "(another job's rank, or a stale address): refusing to connect");
  Digest proof = handshake_mac(token, "connector", out.nonce, acceptor_nonce, my_rank, out.channel);
  send_all(out.fd, proof.data(), proof.size(), timeout_ms, "proving this rank to " + who);
}

void accept_peers(int listen_fd, int my_rank, int size, int num_channels, const std::string& token, int expected,
                  int timeout_ms, const std::function<bool(int, int, int)>& take,
                  const std::function<std::string()>& missing) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  set_nonblocking(listen_fd);  // accept() below takes what is queued and must never wait
  std::vector<Pending> pending;
  Refusals refused;
  auto drop = [&](Pending& p, const std::string& why) {
    if (!why.empty()) refused.note(p.from + ": " + why);
    ::close(p.fd);
    p.fd = -1;
  };
  try {
    while (expected > 0) {
      auto now = Clock::now();
      if (now >= deadline)
        throw TransportError("timed out after " + std::to_string(timeout_ms / 1000) + " s waiting for " + missing() +
                             " to connect to rank " + std::to_string(my_rank) + refused.describe());
      auto wake = deadline;
      for (auto& p : pending) {
        if (p.deadline <= now)
          drop(p, "no complete handshake within " + std::to_string(kPeerHandshakeMs / 1000) + " s");
        else wake = std::min(wake, p.deadline);
      }
      pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Pending& p) { return p.fd < 0; }),
                    pending.end());
      std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
      for (auto& p : pending) fds.push_back({p.fd, POLLIN, 0});
      int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count()) + 1;
      int r = poll(fds.data(), fds.size(), ms);
      if (r < 0 && errno != EINTR)
        throw TransportError(std::string("poll() on the peer port: ") + std::strerror(errno));
      if (r <= 0) continue;
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Pending& p = pending[i - 1];
        size_t need = p.proving ? kProof : kHello;
        ssize_t k = recv(p.fd, p.buf + p.got, need - p.got, MSG_DONTWAIT);
        if (k == 0) {
          drop(p, "closed before completing the handshake");
          continue;
        }
        if (k < 0) {
          if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) drop(p, std::strerror(errno));
          continue;
        }
        p.got += static_cast<size_t>(k);
        if (p.got < need) continue;
        p.got = 0;
        if (!p.proving) {
          p.peer = static_cast<int>(get_u32(p.buf + 4));
          p.channel = static_cast<int>(get_u32(p.buf + 8));
          if (get_u32(p.buf) != kMagic || p.peer <= my_rank || p.peer >= size || p.channel < 0 ||
              p.channel >= num_channels) {
            drop(p, "not a greeting from a higher rank of this job");
            continue;
          }
          std::memcpy(p.connector_nonce, p.buf + 12, kNonce);
          random_nonce(p.acceptor_nonce);
          uint8_t challenge[kChallenge];
          std::memcpy(challenge, p.acceptor_nonce, kNonce);
          Digest mac = handshake_mac(token, "acceptor", p.connector_nonce, p.acceptor_nonce, p.peer, p.channel);
          std::memcpy(challenge + kNonce, mac.data(), mac.size());
          if (send(p.fd, challenge, sizeof challenge, MSG_NOSIGNAL | MSG_DONTWAIT) != ssize_t(sizeof challenge)) {
            drop(p, "could not send the challenge");
            continue;
          }
          p.proving = true;
          continue;
        }
        Digest proof = handshake_mac(token, "connector", p.connector_nonce, p.acceptor_nonce, p.peer, p.channel);
        if (!digests_equal(proof.data(), p.buf, kProof)) {
          drop(p, "claimed to be rank " + std::to_string(p.peer) + " but did not prove it belongs to this job");
          continue;
        }
        int fd = p.fd;
        p.fd = -1;
        set_blocking(fd);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (take(p.peer, p.channel, fd)) {
          --expected;
        } else {
          refused.note(p.from + ": a second connection for rank " + std::to_string(p.peer) + "'s channel");
          ::close(fd);
        }
      }
      pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Pending& p) { return p.fd < 0; }),
                    pending.end());
      if (!(fds[0].revents & POLLIN)) continue;
      // Take every waiting connection; none is read here, so none can hold up the others.
      for (;;) {
        int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            refused.note(std::string("accept(): ") + std::strerror(errno) + " (raise the open-file limit)");
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          break;  // EAGAIN: none left; ECONNABORTED and friends: that connection only
        }
        if (pending.size() >= static_cast<size_t>(kMaxPendingPeers)) {
          auto oldest = std::min_element(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
            return a.proving != b.proving ? !a.proving : a.accepted < b.accepted;
          });
          drop(*oldest, "pushed out by newer connections before completing the handshake");
          pending.erase(oldest);
        }
        Pending p;
        p.fd = fd;
        p.from = peer_name(fd);
        p.accepted = Clock::now();
        p.deadline = p.accepted + std::chrono::milliseconds(kPeerHandshakeMs);
        pending.push_back(p);
      }
    }
  } catch (...) {
    for (auto& p : pending)
      if (p.fd >= 0) ::close(p.fd);
    throw;
  }
  for (auto& p : pending)
    if (p.fd >= 0) ::close(p.fd);
}

}  // namespace hs
