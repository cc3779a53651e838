#include "transport/tcp_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/errors.h"
#include "transport/socket_util.h"

namespace hs {

TcpLink::TcpLink(int fd, int peer_rank) : fd_(fd), peer_rank_(peer_rank), stage_(1 << 20) {
  set_nonblocking(fd_);
  tune_data_socket(fd_);
}

TcpLink::~TcpLink() { close(fd_); }

size_t TcpLink::try_send(const uint8_t* p, size_t n) {
  static const uint8_t kPadding[kAlign] = {};
  if (!p) {  // padding to alignment(): fewer than kAlign bytes
    p = kPadding;
    n = std::min(n, sizeof kPadding);
  }
  ssize_t k = send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k >= 0) return static_cast<size_t>(k);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  throw TransportError("lost connection to rank " + std::to_string(peer_rank_) +
                       " while sending: " + std::strerror(errno));
}

std::pair<const uint8_t*, size_t> TcpLink::peek() {
  // Unread bytes move to the front of stage_ (all of them: a partial element stays whole), and
  // only by multiples of kAlign, so a stream position's address keeps its alignment.
  if (rpos_ == wpos_) rpos_ = wpos_ = rpos_ % kAlign;
  if (wpos_ == stage_.size() && rpos_ >= kAlign) {
    const size_t front = rpos_ % kAlign;
    std::memmove(stage_.data() + front, stage_.data() + rpos_, wpos_ - rpos_);
    wpos_ -= rpos_ - front;
    rpos_ = front;
  }
  if (wpos_ < stage_.size()) {
    ssize_t k = recv(fd_, stage_.data() + wpos_, stage_.size() - wpos_, MSG_DONTWAIT);
    if (k > 0) {
      wpos_ += static_cast<size_t>(k);
    } else if (k == 0) {
      if (rpos_ == wpos_) throw TransportError("rank " + std::to_string(peer_rank_) + " closed its connection");
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw TransportError("lost connection to rank " + std::to_string(peer_rank_) + ": " + std::strerror(errno));
    }
  }
  return {stage_.data() + rpos_, wpos_ - rpos_};
}

void TcpLink::consume(size_t n) { rpos_ += n; }

}  // namespace hs
