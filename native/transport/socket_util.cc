#include "transport/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/errors.h"

namespace hs {

namespace {
using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

void wait_fd(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    struct pollfd p{fd, events, 0};
    int ms = remaining_ms(deadline);
    int r = poll(&p, 1, ms);
    if (r > 0) return;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) throw TransportError("timed out " + what);
    throw TransportError(what + ": poll failed: " + std::strerror(errno));
  }
}
}  // namespace

int tcp_listen(const std::string& host, int* port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!host.empty() && host != "0.0.0.0") {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (gai != 0) throw TransportError("cannot listen for peers on " + host + ": " + gai_strerror(gai));
    addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw TransportError(std::string("socket(): ") + std::strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // A deep queue, so that a flood of other connections fills it less easily: the kernel drops a
  // peer's connection attempt while the queue is full, and the peer's retry waits a second or more.
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1024) != 0) {
    int e = errno;
    close(fd);
    throw TransportError("cannot listen for peers on " + (host.empty() ? std::string("every interface") : host) + ": " +
                         std::strerror(e) +
                         (e == EADDRNOTAVAIL ? " (not an address of this host; HOROVOD_ADVERTISE_ADDR or "
                                               "HOROVOD_GLOO_IFACE name it, HOROVOD_SPARK_BIND_ANY=1 listens on "
                                               "every interface)"
                                             : ""));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

int tcp_connect(const std::string& host, int port, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string last_error = "no attempt";
  while (true) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai == 0) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int ok = connect(fd, res->ai_addr, res->ai_addrlen);
      last_error = std::strerror(errno);
      freeaddrinfo(res);
      if (ok == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
      }
      close(fd);
    } else {
      last_error = gai_strerror(gai);
    }
    if (Clock::now() >= deadline)
      throw TransportError("cannot connect to peer " + host + ":" + std::to_string(port) + ": " + last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int tcp_accept(int listen_fd, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  wait_fd(listen_fd, POLLIN, deadline, "waiting for peers to connect");
  int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) throw TransportError(std::string("accept(): ") + std::strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

void send_all(int fd, const void* p, size_t n, int timeout_ms, const std::string& what) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      c += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      wait_fd(fd, POLLOUT, deadline, what);
      continue;
    }
    throw TransportError(what + ": " + std::strerror(errno));
  }
}

void recv_all(int fd, void* p, size_t n, int timeout_ms, const std::string& what) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t k = recv(fd, c, n, MSG_DONTWAIT);
    if (k > 0) {
      c += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) throw TransportError(what + ": connection closed by peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_fd(fd, POLLIN, deadline, what);
      continue;
    }
    throw TransportError(what + ": " + std::strerror(errno));
  }
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void watch_peer_liveness(int fd) {
  // Probes after 2 s of silence, then every second; 3 unanswered probes (or unacknowledged data
  // older than the limit) end the connection. The peer's kernel answers probes however busy its
  // process is, so a long computation never looks like a lost host.
  int one = 1, idle_s = 2, interval_s = 1, count = 3, user_timeout_ms = kPeerSilenceLimitMs;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

void tune_data_socket(int fd) {
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

}  // namespace hs
