#include "transport/tcp_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/errors.h"
#include "common/frame_mac.h"
#include "common/hmac_sha256.h"
#include "transport/socket_util.h"

namespace hs {

namespace {
void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
}  // namespace

TcpLink::TcpLink(int fd, int peer_rank, std::unique_ptr<FrameKeys> keys)
    : fd_(fd), peer_rank_(peer_rank), stage_(1 << 20), keys_(std::move(keys)) {
  set_nonblocking(fd_);
  tune_data_socket(fd_);
  if (keys_) {
    out_.reserve(kHeader + kMaxFramePayload + kTag);
    wire_.resize(4 * (kHeader + kMaxFramePayload + kTag));
  }
}

TcpLink::~TcpLink() { close(fd_); }

size_t TcpLink::send_some(const uint8_t* p, size_t n) {
  ssize_t k = send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k >= 0) return static_cast<size_t>(k);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  throw TransportError("lost connection to rank " + std::to_string(peer_rank_) +
                       " while sending: " + std::strerror(errno));
}

size_t TcpLink::recv_some(uint8_t* p, size_t n) {
  ssize_t k = recv(fd_, p, n, MSG_DONTWAIT);
  if (k > 0) return static_cast<size_t>(k);
  if (k == 0) {
    if (rpos_ == wpos_) throw TransportError("rank " + std::to_string(peer_rank_) + " closed its connection");
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    throw TransportError("lost connection to rank " + std::to_string(peer_rank_) + ": " + std::strerror(errno));
  }
  return 0;
}

void TcpLink::frame_tag(const uint8_t* key, uint64_t number, const uint8_t* frame, size_t payload, uint8_t* tag) const {
  uint8_t nonce[kChachaNonce] = {};
  for (int i = 0; i < 8; ++i) nonce[4 + i] = uint8_t(number >> (8 * i));
  uint8_t one_time[kPolyKey];
  poly1305_key_gen(key, nonce, one_time);
  Poly1305 mac(one_time);
  mac.update(frame, kHeader + payload);
  mac.finish(tag);
}

size_t TcpLink::try_send(const uint8_t* p, size_t n) {
  static const uint8_t kPadding[kAlign] = {};
  if (!p) {  // padding to alignment(): fewer than kAlign bytes
    p = kPadding;
    n = std::min(n, sizeof kPadding);
  }
  if (!keys_) return send_some(p, n);
  // One frame at a time: the next is built once the last has gone out whole.
  if (!flush() || n == 0) return 0;
  const size_t take = std::min(n, kMaxFramePayload);
  out_.resize(kHeader + take + kTag);
  put_le32(out_.data(), static_cast<uint32_t>(take));
  std::memcpy(out_.data() + kHeader, p, take);
  frame_tag(keys_->send, sent_frames_++, out_.data(), take, out_.data() + kHeader + take);
  out_off_ = 0;
  flush();
  return take;
}

bool TcpLink::flush() {
  while (out_off_ < out_.size()) {
    size_t k = send_some(out_.data() + out_off_, out_.size() - out_off_);
    if (k == 0) return false;
    out_off_ += k;
  }
  return true;
}

void TcpLink::make_room(size_t need) {
  // Unread bytes move to the front of stage_ (all of them: a partial element stays whole), and
  // only by multiples of kAlign, so a stream position's address keeps its alignment.
  if (rpos_ == wpos_) rpos_ = wpos_ = rpos_ % kAlign;
  if (stage_.size() - wpos_ < need && rpos_ >= kAlign) {
    const size_t front = rpos_ % kAlign;
    std::memmove(stage_.data() + front, stage_.data() + rpos_, wpos_ - rpos_);
    wpos_ -= rpos_ - front;
    rpos_ = front;
  }
}

void TcpLink::receive_plain() {
  make_room(1);
  if (wpos_ == stage_.size()) return;
  wpos_ += recv_some(stage_.data() + wpos_, stage_.size() - wpos_);
}

void TcpLink::altered(const std::string& what) const {
  throw DataAlteredError("the data on the link " + keys_->link + " was altered in transit (" + what +
                         "): something between the two ranks rewrote, dropped or injected bytes; the collective "
                         "is abandoned on every rank");
}

void TcpLink::open_frames() {
  // Checks whole frames and moves their payloads into stage_ while it has room.
  for (;;) {
    const size_t have = wire_w_ - wire_r_;
    if (have < kHeader) return;
    const uint8_t* frame = wire_.data() + wire_r_;
    const size_t payload = get_le32(frame);
    if (payload == 0 || payload > kMaxFramePayload)
      altered("frame " + std::to_string(received_frames_) + " claims " + std::to_string(payload) + " bytes");
    if (have < kHeader + payload + kTag) return;
    make_room(payload);
    if (stage_.size() - wpos_ < payload) return;
    uint8_t tag[kTag];
    frame_tag(keys_->recv, received_frames_, frame, payload, tag);
    if (!digests_equal(tag, frame + kHeader + payload, kTag))
      altered("frame " + std::to_string(received_frames_) + " failed its Poly1305 check");
    ++received_frames_;
    std::memcpy(stage_.data() + wpos_, frame + kHeader, payload);
    wpos_ += payload;
    wire_r_ += kHeader + payload + kTag;
  }
}

void TcpLink::receive_frames() {
  open_frames();
  if (wire_r_ > 0) {  // a partial frame moves to the front, so a whole one always fits
    std::memmove(wire_.data(), wire_.data() + wire_r_, wire_w_ - wire_r_);
    wire_w_ -= wire_r_;
    wire_r_ = 0;
  }
  if (wire_w_ == wire_.size()) return;  // stage_ is full: the reader catches up first
  const size_t k = recv_some(wire_.data() + wire_w_, wire_.size() - wire_w_);
  if (k > 0) {
    wire_w_ += k;
    open_frames();
  }
}

std::pair<const uint8_t*, size_t> TcpLink::peek() {
  if (keys_) receive_frames();
  else receive_plain();
  return {stage_.data() + rpos_, wpos_ - rpos_};
}

void TcpLink::consume(size_t n) { rpos_ += n; }

}  // namespace hs
