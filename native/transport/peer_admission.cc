#include "transport/peer_admission.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "common/errors.h"
#include "transport/peer_wire.h"
#include "transport/socket_util.h"

namespace hs {

using namespace peer_wire;

namespace {
using Clock = std::chrono::steady_clock;
// Connections taken from the listen queue before the pending ones are read again, so a flood of
// new connections cannot starve the reads of those already accepted.
constexpr int kAcceptBurst = 256;
constexpr size_t kAddressesShown = 4;
constexpr size_t kReasonsShown = 5;

std::string address_of(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  char text[INET_ADDRSTRLEN] = "?";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return text;
}

struct Conn {
  int fd = -1;
  std::string address;
  Clock::time_point accepted, deadline;
  bool proving = false;  // its greeting proved the secret and the challenge went out
  uint8_t buf[kHello] = {};
  size_t got = 0;
  int peer = -1, channel = -1;
  uint8_t connector_nonce[kNonce] = {}, acceptor_nonce[kNonce] = {};
};

// Per source address, the connections turned away without proving the secret, counted by reason.
class Refusals {
 public:
  void note(const std::string& address, const std::string& why) {
    ++total_;
    Tally& t = by_address_[address];
    ++t.total;
    for (auto& r : t.reasons)
      if (r.first == why) {
        ++r.second;
        return;
      }
    t.reasons.emplace_back(why, 1);
  }
  void note_duplicate() { ++duplicates_; }

  std::string describe() const {
    std::string s;
    if (total_) {
      std::vector<std::pair<size_t, std::string>> order;
      for (const auto& [address, t] : by_address_) order.emplace_back(t.total, address);
      std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      s = "; meanwhile " + std::to_string(total_) + " connection(s) never proved the job's secret: ";
      size_t rest = 0;
      for (size_t i = 0; i < order.size(); ++i) {
        if (i >= kAddressesShown) {
          rest += order[i].first;
          continue;
        }
        const Tally& t = by_address_.at(order[i].second);
        s += (i ? "; " : "") + std::to_string(t.total) + " from " + order[i].second + " (";
        for (size_t j = 0; j < t.reasons.size() && j < kReasonsShown; ++j)
          s += (j ? ", " : "") + std::to_string(t.reasons[j].second) + " " + t.reasons[j].first;
        s += t.reasons.size() > kReasonsShown ? ", ...)" : ")";
      }
      if (rest)
        s += "; " + std::to_string(rest) + " from " + std::to_string(order.size() - kAddressesShown) +
             " other address(es)";
    }
    if (duplicates_)
      s += "; " + std::to_string(duplicates_) + " connection(s) proved the secret for a channel already connected";
    return s;
  }

 private:
  struct Tally {
    size_t total = 0;
    std::vector<std::pair<std::string, size_t>> reasons;  // in the order first seen
  };
  std::map<std::string, Tally> by_address_;
  size_t total_ = 0, duplicates_ = 0;
};

class Acceptor {
 public:
  Acceptor(int listen_fd, int my_rank, int size, int num_channels, const std::string& token, bool framed,
           const std::function<bool(const AdmittedPeer&)>& take)
      : listen_fd_(listen_fd),
        my_rank_(my_rank),
        size_(size),
        num_channels_(num_channels),
        token_(token),
        framed_(framed),
        take_(take) {}
  ~Acceptor() {
    for (auto& c : conns_)
      if (c->fd >= 0) ::close(c->fd);
  }

  // Serves the peer port until `expected` connections were taken or the deadline passes (false).
  bool run(int expected, Clock::time_point deadline) {
    expected_ = expected;
    while (expected_ > 0) {
      if (!fatal_.empty()) return false;
      auto now = Clock::now();
      if (now >= deadline) return false;
      auto wake = deadline;
      for (auto& c : conns_) {
        if (c->deadline <= now)
          refuse(*c, kRefusedBusy,
                 "did not complete the handshake within " + std::to_string(kPeerHandshakeMs / 1000) + " s");
        else wake = std::min(wake, c->deadline);
      }
      sweep();
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (auto& c : conns_) fds.push_back({c->fd, POLLIN, 0});
      int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count()) + 1;
      int r = poll(fds.data(), fds.size(), ms);
      if (r < 0 && errno != EINTR)
        throw TransportError(std::string("poll() on the peer port: ") + std::strerror(errno));
      if (r <= 0) continue;
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents) advance(*conns_[i - 1]);
      sweep();
      if (fds[0].revents & POLLIN) accept_burst();
    }
    return true;
  }

  const std::set<int>& greeted() const { return greeted_; }
  const std::string& fatal() const { return fatal_; }
  const Refusals& refusals() const { return refusals_; }

 private:
  void accept_burst() {
    for (int n = 0; n < kAcceptBurst && expected_ > 0; ++n) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          refusals_.note("this host",
                         std::string("not accepted: ") + std::strerror(errno) + " (raise the open-file limit)");
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return;  // EAGAIN: none left; ECONNABORTED and friends: that connection only
      }
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->address = address_of(fd);
      c->accepted = Clock::now();
      c->deadline = c->accepted + std::chrono::milliseconds(kPeerHandshakeMs);
      advance(*c);  // a real peer's greeting is usually here already
      if (c->fd < 0) continue;
      if (!c->proving) make_room(c->address);
      conns_.push_back(std::move(c));
    }
  }

  // Pushes out the oldest unproven connections until one more from `address` fits both limits.
  void make_room(const std::string& address) {
    for (;;) {
      std::map<std::string, size_t> per_address;
      size_t unproven = 0;
      for (auto& c : conns_)
        if (c->fd >= 0 && !c->proving) ++per_address[c->address], ++unproven;
      std::string from;
      if (per_address[address] >= static_cast<size_t>(kMaxPendingPerAddress)) {
        from = address;
      } else if (unproven >= static_cast<size_t>(kMaxPendingPeers)) {
        from = std::max_element(per_address.begin(), per_address.end(), [](const auto& a, const auto& b) {
                 return a.second < b.second;
               })->first;
      } else {
        return;
      }
      Conn* oldest = nullptr;
      for (auto& c : conns_)
        if (c->fd >= 0 && !c->proving && c->address == from && (!oldest || c->accepted < oldest->accepted))
          oldest = c.get();
      advance(*oldest);  // one last read: its greeting may have arrived since
      if (oldest->fd >= 0 && !oldest->proving)
        refuse(*oldest, kRefusedBusy, "pushed out by newer connections before they sent a complete greeting");
      sweep();
    }
  }

  // Reads what has arrived of the message the connection owes, and acts on a complete one.
  void advance(Conn& c) {
    if (c.fd < 0) return;
    const size_t need = c.proving ? kProof : kHello;
    while (c.got < need) {
      ssize_t k = recv(c.fd, c.buf + c.got, need - c.got, MSG_DONTWAIT);
      if (k == 0) return refuse(c, 0, "closed before completing the handshake");
      if (k < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) refuse(c, 0, std::strerror(errno));
        return;
      }
      c.got += static_cast<size_t>(k);
    }
    c.got = 0;
    if (c.proving) return check_proof(c);
    check_greeting(c);
  }

  void check_greeting(Conn& c) {
    c.peer = static_cast<int>(get_u32(c.buf + 4));
    c.channel = static_cast<int>(get_u32(c.buf + 8));
    if (get_u32(c.buf) != kMagic || c.peer <= my_rank_ || c.peer >= size_ || c.channel < 0 ||
        c.channel >= num_channels_)
      return refuse(c, 0, "sent no greeting from a higher rank of this job");
    std::memcpy(c.connector_nonce, c.buf + 12, kNonce);
    Digest mac = handshake_mac(token_, "hello", c.connector_nonce, nullptr, c.peer, c.channel, framed_);
    Digest other = handshake_mac(token_, "hello", c.connector_nonce, nullptr, c.peer, c.channel, !framed_);
    if (digests_equal(other.data(), c.buf + 12 + kNonce, kMac)) {
      fatal_ = std::string("rank ") + std::to_string(c.peer) + " (" + c.address + ") has " + kModeSetting + " " +
               (framed_ ? "off" : "on") + " while rank " + std::to_string(my_rank_) + " has it " +
               (framed_ ? "on" : "off") + ": ranks with authenticated and plain data links cannot talk to each " +
               "other; set " + kModeSetting + " alike on every rank (the launchers pass the driver's value on)";
      return refuse(c, kRefusedMode, "has the other " + std::string(kModeSetting));
    }
    if (!digests_equal(mac.data(), c.buf + 12 + kNonce, kMac))
      return refuse(c, kRefusedSecret,
                    "claimed to be rank " + std::to_string(c.peer) + " but did not prove it belongs to this job");
    if (!nonces_.insert(std::string(reinterpret_cast<char*>(c.connector_nonce), kNonce)).second)
      return refuse(c, kRefusedDuplicate, "repeated a greeting already used (a replay)");
    greeted_.insert(c.peer);
    random_nonce(c.acceptor_nonce);
    uint8_t challenge[kChallenge];
    std::memcpy(challenge, c.acceptor_nonce, kNonce);
    Digest answer = handshake_mac(token_, "acceptor", c.connector_nonce, c.acceptor_nonce, c.peer, c.channel, framed_);
    std::memcpy(challenge + kNonce, answer.data(), kMac);
    if (send(c.fd, challenge, sizeof challenge, MSG_NOSIGNAL | MSG_DONTWAIT) != ssize_t(sizeof challenge))
      return refuse(c, 0, "could not be sent the challenge");
    c.proving = true;
  }

  void check_proof(Conn& c) {
    Digest proof = handshake_mac(token_, "connector", c.connector_nonce, c.acceptor_nonce, c.peer, c.channel, framed_);
    if (!digests_equal(proof.data(), c.buf, kProof))
      return refuse(c, 0, "repeated rank " + std::to_string(c.peer) + "'s greeting but did not answer the challenge");
    int fd = c.fd;
    c.fd = -1;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    AdmittedPeer admitted{c.peer, c.channel, fd, {}, {}};
    std::memcpy(admitted.connector_nonce, c.connector_nonce, kNonce);
    std::memcpy(admitted.acceptor_nonce, c.acceptor_nonce, kNonce);
    if (take_(admitted)) {
      --expected_;
    } else {
      refusals_.note_duplicate();
      ::close(fd);
    }
  }

  // Closes a connection, first telling the other end why in one byte when `code` is not 0.
  void refuse(Conn& c, uint8_t code, const std::string& why) {
    if (code) {
      ssize_t ignored = send(c.fd, &code, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)ignored;
    }
    ::close(c.fd);
    c.fd = -1;
    refusals_.note(c.address, why);
  }

  void sweep() {
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->fd < 0; }), conns_.end());
  }

  int listen_fd_, my_rank_, size_, num_channels_;
  const std::string& token_;
  const bool framed_;
  const std::function<bool(const AdmittedPeer&)>& take_;
  std::string fatal_;  // why init cannot succeed, found while admitting (the peers disagree on a setting)
  int expected_ = 0;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::set<std::string> nonces_;  // connector nonces of greetings that proved the secret
  std::set<int> greeted_;         // ranks whose greeting proved the secret
  Refusals refusals_;
};
}  // namespace

void accept_peers(int listen_fd, int my_rank, int size, int num_channels, const std::string& token, bool framed,
                  int expected, int timeout_ms, const std::function<bool(const AdmittedPeer&)>& take,
                  const std::function<std::vector<int>()>& missing_ranks,
                  const std::function<std::string(int)>& describe) {
  set_nonblocking(listen_fd);  // accept() must never wait
  Acceptor acceptor(listen_fd, my_rank, size, num_channels, token, framed, take);
  if (acceptor.run(expected, Clock::now() + std::chrono::milliseconds(timeout_ms))) return;
  if (!acceptor.fatal().empty()) throw TransportError(acceptor.fatal());
  std::string who, unfinished;
  const std::vector<int> missing = missing_ranks();
  for (int r : missing) {
    who += (who.empty() ? "" : ", ") + describe(r);
    if (acceptor.greeted().count(r)) unfinished += (unfinished.empty() ? "" : ", ") + std::to_string(r);
  }
  if (who.empty()) who = "no rank";
  const std::string seen =
      unfinished.empty()
          ? std::string(": no connection to this rank's peer port proved to come from ") +
                (missing.size() == 1 ? "it" : "them")
          : ": a greeting as rank " + unfinished + " proved the job's secret, but its handshake did not complete";
  throw TransportError("timed out after " + std::to_string(timeout_ms / 1000) + " s waiting for " + who +
                       " to connect to rank " + std::to_string(my_rank) + seen + acceptor.refusals().describe());
}

}  // namespace hs
