// One direction-pair byte stream to one peer. Non-blocking by design: the exchange loop drives many
// links at once, so a full send buffer or an empty receive buffer is "no progress", never a block.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

namespace hs {

class PeerLink {
 public:
  virtual ~PeerLink() = default;
  // Writes up to n bytes; returns how many were taken (0 when the peer's buffer is full).
  virtual size_t try_send(const uint8_t* p, size_t n) = 0;
  // A contiguous span of received, not yet consumed bytes (length 0 when none). Spans never split
  // an element of a message that started aligned (see alignment()).
  virtual std::pair<const uint8_t*, size_t> peek() = 0;
  virtual void consume(size_t n) = 0;
  // Every message occupies a multiple of this many bytes in the stream (both sides pad alike).
  virtual size_t alignment() const { return 1; }
  // Tells the peer that progress was made (data written or space freed), waking it if it sleeps.
  virtual void notify_peer() {}
  // A socket to poll() for readiness, or -1 for shared memory (woken through the doorbell instead).
  virtual int poll_fd() const { return -1; }
};

}  // namespace hs
