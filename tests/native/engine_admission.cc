// The peer port's admission (transport/peer_admission.h) against a hostile thread: connections
// from 127.0.0.1 that send a greeting's header and stall, and a stream of new silent ones, as fast
// as one thread can open them. The real peer, on the same address, still connects all its
// channels; a connector with another job's token is told so; and when the real peer never comes,
// the error names the flood and the missing rank.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <thread>

#include "engine_ranks.h"
#include "engine_scenarios.h"
#include "transport/peer_admission.h"
#include "transport/peer_handshake.h"
#include "transport/socket_util.h"

namespace hs_test {

namespace {

constexpr int kChannels = 3;
const std::string kToken = "job-token-of-the-admission-scenario";

class Flood {
 public:
  explicit Flood(int port) : port_(port), thread_([this] { run(); }) {}
  ~Flood() {
    stop_ = true;
    thread_.join();
  }
  long opened() const { return opened_.load(); }
  void wait_for(long n) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (opened_.load() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

 private:
  void run() {
    std::deque<int> held;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    uint8_t header[28] = {'H', 'S', 'P', '3', 0, 0, 0, 1, 0, 0, 0, 0};  // rank 1, channel 0, then silence
    for (long n = 0; !stop_; ++n) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        if (fd >= 0) ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      ++opened_;
      if (n % 4 == 0) {
        ssize_t ignored = send(fd, header, sizeof header, MSG_NOSIGNAL);
        (void)ignored;
      }
      held.push_back(fd);
      if (held.size() > 300) {
        ::close(held.front());
        held.pop_front();
      }
    }
    for (int fd : held) ::close(fd);
  }

  int port_;
  std::atomic<bool> stop_{false};
  std::atomic<long> opened_{0};
  std::thread thread_;
};

struct Accepted {
  int fds[kChannels] = {-1, -1, -1};
  std::string error;
  ~Accepted() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

// Rank 0 of two accepting rank 1's channels on listen_fd.
void accept_rank1(int listen_fd, int timeout_ms, Accepted* got) {
  try {
    hs::accept_peers(
        listen_fd, 0, 2, kChannels, kToken, false, kChannels, timeout_ms,
        [&](const hs::AdmittedPeer& a) {
          if (a.peer != 1 || got->fds[a.channel] >= 0) return false;
          got->fds[a.channel] = a.fd;
          return true;
        },
        [&] {
          return got->fds[0] < 0 || got->fds[1] < 0 || got->fds[2] < 0 ? std::vector<int>{1} : std::vector<int>{};
        },
        [](int peer) { return "rank " + std::to_string(peer) + " (127.0.0.1)"; });
  } catch (const std::exception& e) {
    got->error = e.what();
  }
}

// Rank 1 connecting its channels to rank 0; the connection fds stay open in *fds.
std::string connect_as_rank1(int port, const std::string& token, int fds[kChannels]) {
  std::vector<hs::OutgoingPeer> out;
  try {
    for (int ch = 0; ch < kChannels; ++ch)
      out.push_back(hs::greet_peer("127.0.0.1", port, 1, 0, ch, token, false, 60000, "rank 0"));
    for (auto& o : out) hs::prove_to_peer(o, 1, token, 60000, "rank 0");
  } catch (const std::exception& e) {
    for (auto& o : out)
      if (o.fd >= 0) ::close(o.fd);
    return e.what();
  }
  for (int ch = 0; ch < kChannels; ++ch) fds[ch] = out[static_cast<size_t>(ch)].fd;
  return "";
}

void real_peer_gets_through_the_flood() {
  int port = 0;
  int listen_fd = hs::tcp_listen("127.0.0.1", &port);
  Accepted got;
  std::thread acceptor(accept_rank1, listen_fd, 60000, &got);
  int mine[kChannels] = {-1, -1, -1};
  std::string error;
  long during = 0;
  {
    Flood flood(port);
    flood.wait_for(500);
    error = connect_as_rank1(port, kToken, mine);
    acceptor.join();
    during = flood.opened();
  }
  ::close(listen_fd);
  std::fprintf(stderr, "  real peer connected while %ld hostile connections hit the port\n", during);
  expect(error.empty(), 1, "rank 1 could not connect through the flood: " + error);
  expect(got.error.empty(), 0, "rank 0 did not admit rank 1 through the flood: " + got.error);
  for (int ch = 0; ch < kChannels && error.empty() && got.error.empty(); ++ch) {
    char sent = static_cast<char>('a' + ch), seen = 0;
    expect(send(mine[ch], &sent, 1, MSG_NOSIGNAL) == 1 && recv(got.fds[ch], &seen, 1, 0) == 1 && seen == sent, 0,
           "channel " + std::to_string(ch) + " does not connect the two ranks");
  }
  for (int fd : mine)
    if (fd >= 0) ::close(fd);
}

void another_jobs_rank_is_told_so() {
  int port = 0;
  int listen_fd = hs::tcp_listen("127.0.0.1", &port);
  Accepted got;
  std::thread acceptor(accept_rank1, listen_fd, 3000, &got);
  int mine[kChannels] = {-1, -1, -1};
  std::string error = connect_as_rank1(port, "another job's token", mine);
  acceptor.join();
  ::close(listen_fd);
  expect(contains(error, "refused this rank's proof of the job's secret"), 1, "connector's error: " + error);
  expect(contains(got.error, "claimed to be rank 1 but did not prove it belongs to this job"), 0,
         "acceptor's error: " + got.error);
}

void missing_peer_and_flood_are_named() {
  int port = 0;
  int listen_fd = hs::tcp_listen("127.0.0.1", &port);
  Accepted got;
  long opened = 0;
  {
    Flood flood(port);
    accept_rank1(listen_fd, 3000, &got);
    opened = flood.opened();
  }
  ::close(listen_fd);
  std::fprintf(stderr, "  %ld hostile connections in 3 s\n", opened);
  const std::string& e = got.error;
  expect(contains(e, "timed out after 3 s waiting for rank 1 (127.0.0.1) to connect to rank 0: no connection"), 0,
         "error: " + e);
  expect(contains(e, "connection(s) never proved the job's secret: ") && contains(e, " from 127.0.0.1 (") &&
             contains(e, "pushed out by newer connections"),
         0, "error: " + e);
}

}  // namespace

void scenario_admission() {
  real_peer_gets_through_the_flood();
  another_jobs_rank_is_told_so();
  missing_peer_and_flood_are_named();
}

}  // namespace hs_test
