// PeerLink over a non-blocking TCP socket, for peers on other hosts. Received bytes land in a
// staging buffer so the exchange loop can reduce them in element-aligned pieces.
//
// With frame authentication (HOROVOD_SPARK_DATA_PLANE_AUTH), the stream is a sequence of frames,
//   payload length (u32, little-endian) | payload (at most kMaxFramePayload bytes) | tag (16 bytes)
// where the tag is Poly1305 over length and payload, under a one-time key that ChaCha20 derives
// from the direction's key and the frame's number (common/frame_mac.h). The receiver checks a
// frame whole before its payload enters the staging buffer, so peek() never shows a byte that was
// not checked: the exchange loop reduces received bytes in place before a message is complete.
// A frame dropped, replayed, reordered, or copied from another link or direction fails the check.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/peer_link.h"

namespace hs {

// The keys of one link's two directions, and the words that name it in an error.
struct FrameKeys {
  uint8_t send[32];
  uint8_t recv[32];
  std::string link;  // e.g. "rank 1 (10.0.0.2) -> rank 0 (10.0.0.1), data channel"
};

class TcpLink : public PeerLink {
 public:
  static constexpr size_t kMaxFramePayload = 64 << 10;
  // keys null: the plain stream of bytes.
  TcpLink(int fd, int peer_rank, std::unique_ptr<FrameKeys> keys = nullptr);
  ~TcpLink() override;
  size_t try_send(const uint8_t* p, size_t n) override;
  std::pair<const uint8_t*, size_t> peek() override;
  void consume(size_t n) override;
  bool flush() override;
  bool holds_unsent() const override { return out_off_ < out_.size(); }
  int poll_fd() const override { return fd_; }
  // Reductions read received elements in place, so a message must start where its widest elements
  // may be read: each starts at a multiple of kAlign in the stream (both sides pad), and stage_
  // keeps every stream position at the same offset modulo kAlign (see peek()).
  size_t alignment() const override { return kAlign; }

 private:
  static constexpr size_t kAlign = 8;  // the widest element (int64, float64)
  static constexpr size_t kHeader = 4, kTag = 16;
  void make_room(size_t need);
  size_t send_some(const uint8_t* p, size_t n);
  // What has arrived, up to n bytes (0: nothing yet). A closed connection is an error once every
  // byte it delivered has been read.
  size_t recv_some(uint8_t* p, size_t n);
  void receive_plain();
  void receive_frames();
  void open_frames();
  void frame_tag(const uint8_t* key, uint64_t number, const uint8_t* frame, size_t payload, uint8_t* tag) const;
  [[noreturn]] void altered(const std::string& what) const;
  int fd_;
  int peer_rank_;
  std::vector<uint8_t> stage_;  // (operator new's alignment, at least kAlign)
  size_t rpos_ = 0, wpos_ = 0;
  std::unique_ptr<FrameKeys> keys_;
  std::vector<uint8_t> out_;  // the frame being written, and how much of it was
  size_t out_off_ = 0;
  std::vector<uint8_t> wire_;  // received frames not yet checked
  size_t wire_r_ = 0, wire_w_ = 0;
  uint64_t sent_frames_ = 0, received_frames_ = 0;
};

}  // namespace hs
