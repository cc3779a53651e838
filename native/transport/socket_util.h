// Thin, timeout-bounded helpers over POSIX sockets for the core's TCP mesh.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hs {

// Listens on an ephemeral port of `host` (an address of this machine; "" for every interface);
// returns the fd and sets *port.
int tcp_listen(const std::string& host, int* port);
// Connects with retries until timeout_ms (the peer may not be listening yet).
int tcp_connect(const std::string& host, int port, int timeout_ms);
// Accepts one connection or throws TransportError after timeout_ms.
int tcp_accept(int listen_fd, int timeout_ms);
// Blocking full transfers bounded by timeout_ms; throw TransportError with `what` in the message.
void send_all(int fd, const void* p, size_t n, int timeout_ms, const std::string& what);
void recv_all(int fd, void* p, size_t n, int timeout_ms, const std::string& what);
void set_nonblocking(int fd);
void tune_data_socket(int fd);
// Lets the kernel probe an otherwise idle connection and fail it (ETIMEDOUT) once the peer's host
// has not answered for about kPeerSilenceLimitMs: a cut link or a lost host sends no FIN or RST.
constexpr int kPeerSilenceLimitMs = 5000;
void watch_peer_liveness(int fd);

}  // namespace hs
