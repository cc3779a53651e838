// One direction-pair byte stream to one peer. Non-blocking by design: the exchange loop drives many
// links at once, so a full send buffer or an empty receive buffer is "no progress", never a block.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

namespace hs {

class ShmLink;

class PeerLink {
 public:
  virtual ~PeerLink() = default;
  // Writes up to n bytes; returns how many were taken (0 when the peer's buffer is full).
  virtual size_t try_send(const uint8_t* p, size_t n) = 0;
  // A contiguous span of received, not yet consumed bytes (length 0 when none). Spans never split
  // an element of a message that started aligned (see alignment()).
  virtual std::pair<const uint8_t*, size_t> peek() = 0;
  virtual void consume(size_t n) = 0;
  // Writes out bytes that try_send took but held back (an authenticated frame not yet written
  // whole, tcp_link.h); true when none are left. A send is complete only once this is true.
  virtual bool flush() { return true; }
  virtual bool holds_unsent() const { return false; }
  // Every message occupies a multiple of this many bytes in the stream (both sides pad alike).
  virtual size_t alignment() const { return 1; }
  // Tells the peer that data was written, waking it if it sleeps.
  virtual void notify_peer() {}
  // After consume(): wakes the peer only if it waits for room to write (see wait_for_space).
  // A writer that has room never needs to hear about freed space, and a wake-up costs the
  // reader an atomic on a cache line the writer is spinning on.
  virtual void notify_space_freed() {}
  // The writer side: `waiting` true once a send could not write everything (then try the send
  // once more before sleeping: freed space is announced only after this), false when it could.
  virtual void wait_for_space(bool waiting) { (void)waiting; }
  // A number that changes whenever bytes arrive or the peer frees room (shared memory only;
  // sockets are polled): a thread about to sleep on the doorbell compares it with the value it
  // saw before its last look for work, after announcing its sleep.
  virtual uint64_t news_mark() const { return 0; }
  // A socket to poll() for readiness, or -1 for shared memory (woken through the doorbell instead).
  virtual int poll_fd() const { return -1; }
  // The shared-memory link behind this one, for single-copy transfers; null for sockets.
  virtual ShmLink* shm() { return nullptr; }
};

}  // namespace hs
