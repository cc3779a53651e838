// PeerLink over a non-blocking TCP socket, for peers on other hosts. Received bytes land in a
// staging buffer so the exchange loop can reduce them in element-aligned pieces.
#pragma once
#include <vector>
#include "transport/peer_link.h"

namespace hs {

class TcpLink : public PeerLink {
 public:
  TcpLink(int fd, int peer_rank);
  ~TcpLink() override;
  size_t try_send(const uint8_t* p, size_t n) override;
  std::pair<const uint8_t*, size_t> peek() override;
  void consume(size_t n) override;
  int poll_fd() const override { return fd_; }
  // Reductions read received elements in place, so a message must start where its widest elements
  // may be read: each starts at a multiple of kAlign in the stream (both sides pad), and stage_
  // keeps every stream position at the same offset modulo kAlign (see peek()).
  size_t alignment() const override { return kAlign; }

 private:
  static constexpr size_t kAlign = 8;  // the widest element (int64, float64)
  int fd_;
  int peer_rank_;
  std::vector<uint8_t> stage_;  // (operator new's alignment, at least kAlign)
  size_t rpos_ = 0, wpos_ = 0;
};

}  // namespace hs
