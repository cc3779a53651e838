// The per-host shared-memory segment: one byte ring per ordered pair of local ranks for data and one
// for control messages, plus a doorbell word per local rank. One segment per host (not per pair)
// so a rank can sleep on a single futex that every local peer rings.
#pragma once
#include <sys/types.h>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include "transport/cpu_placement.h"
#include "transport/peer_link.h"

namespace hs {

// A single-copy message's copy shared by both ends (single_copy.h, "Shared copies"), in the header
// of the ring its spans travel on. The reader offers the message in chunks; then the reader claims
// chunks from the front and reads them, the writer claims chunks from the back and writes them,
// until none are left.
struct alignas(64) CopyShare {
  std::atomic<uint64_t> offers;  // offers ever made: a new one is news for a waiting writer (reader owns)
  // The offer: which message (its end in RingHeader::copied terms), where it goes in the reader,
  // its size and the size of one chunk. Written by the reader before `claims` (release).
  std::atomic<uint64_t> message_end;
  std::atomic<uint64_t> dest;
  std::atomic<uint64_t> bytes;
  std::atomic<uint64_t> chunk;
  // The unclaimed chunks and the offer's tag (pack_claims in single_copy.h); both ends claim by
  // compare-and-swap.
  std::atomic<uint64_t> claims;
  // Bytes the writer has ever written into offered messages, each store after its write
  // (release): the reader's copy is complete when the writer's share has landed (writer owns).
  std::atomic<uint64_t> pushed;
  char pad[8];
};
static_assert(sizeof(CopyShare) == 64, "CopyShare is one cache line");

struct alignas(64) RingHeader {
  std::atomic<uint64_t> head;  // bytes ever written (writer owns)
  std::atomic<uint32_t> writer_waits;  // 1 while the writer waits for space (writer owns)
  char pad0[52];
  std::atomic<uint64_t> tail;  // bytes ever consumed (reader owns)
  // Bytes of single-copy messages the reader has read straight out of the writer's memory
  // (single_copy.h): a single-copy send is complete when this passes its end (reader owns).
  std::atomic<uint64_t> copied;
  // Messages of at least this many bytes travel single-copy; 0: never. Set once by the reader
  // at set-up, from its probe of the writer's memory and its HOROVOD_SHM_SINGLE_COPY_BYTES, so
  // both ends follow the reader's choice.
  std::atomic<uint64_t> single_copy_from;
  char pad1[40];
  CopyShare share;  // the copy of the single-copy message being read, when shared (both ends)
};

// A rank's futex word. Sleepers announce themselves (sleeping) and then look for news once more;
// peers that wrote to this rank ring only when someone sleeps (doorbell_ring_if_sleeping), so a
// busy pair of ranks exchanges data without touching each other's doorbell line at all.
struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq;       // bumped by every ring
  std::atomic<uint32_t> sleeping;  // threads of the owner that may be in futex_wait
  std::atomic<uint32_t> pid;       // owner's pid, for liveness checks and single-copy reads
  // Where a peer can read probe_value in the owner's memory: the set-up's single-copy probe.
  std::atomic<uint64_t> probe_addr;
  std::atomic<uint64_t> probe_value;
  char pad[32];
  // The owner's affinity mask (CpuMask's words; cpus_known is 0 when it could not be read), so
  // that each rank can tell whether the host's ranks share CPUs.
  std::atomic<uint64_t> cpus[CpuMask::kWords];
  std::atomic<uint32_t> cpus_known;
};

class ShmSegment {
 public:
  // The creator (lowest local rank) makes and sizes the segment; others attach by name.
  static std::unique_ptr<ShmSegment> create(const std::string& name, int local_size, size_t data_ring_bytes,
                                            size_t ctrl_ring_bytes);
  static std::unique_ptr<ShmSegment> attach(const std::string& name, int local_size, size_t data_ring_bytes,
                                            size_t ctrl_ring_bytes);
  ~ShmSegment();
  void unlink();  // after every local rank attached: nothing is left in /dev/shm after a crash

  Doorbell* doorbell(int local_rank);
  RingHeader* ring(bool control, int from_local, int to_local);
  uint8_t* ring_data(bool control, int from_local, int to_local);
  size_t ring_bytes(bool control) const { return control ? ctrl_bytes_ : data_bytes_; }

 private:
  ShmSegment(const std::string& name, int local_size, size_t data_bytes, size_t ctrl_bytes);
  size_t ring_offset(bool control, int from_local, int to_local) const;
  size_t total_bytes() const;
  std::string name_;
  int local_size_;
  size_t data_bytes_, ctrl_bytes_;
  uint8_t* base_ = nullptr;
  bool unlinked_ = false;
};

// Blocks the calling thread until doorbell->seq != seen or timeout_us passes, unless
// has_news(ctx), asked after announcing the sleep, says there is work already.
void doorbell_wait(Doorbell* d, uint32_t seen, int timeout_us, bool (*has_news)(void*) = nullptr, void* ctx = nullptr);
// Bumps seq and wakes every sleeper: for signals a sleeper cannot see by looking (a local
// thread's request, a hand-over).
void doorbell_ring(Doorbell* d);
// For data written to (or space freed in) a ring the owner re-checks before sleeping: rings only
// if the owner may sleep. Call after the ring's head/tail store.
void doorbell_ring_if_sleeping(Doorbell* d);

// A PeerLink over two rings of a ShmSegment (mine→peer for sending, peer→mine for receiving).
class ShmLink : public PeerLink {
 public:
  ShmLink(ShmSegment* seg, bool control, int my_local, int peer_local);
  size_t try_send(const uint8_t* p, size_t n) override;
  std::pair<const uint8_t*, size_t> peek() override;
  void consume(size_t n) override;
  size_t alignment() const override { return 64; }
  void notify_peer() override { doorbell_ring_if_sleeping(peer_bell_); }
  void notify_space_freed() override;
  void wait_for_space(bool waiting) override;
  uint64_t news_mark() const override;
  ShmLink* shm() override { return this; }

  // Single-copy transfers (single_copy.h). Sending: the size from which the reader takes messages
  // single-copy (0: never); note_single_copy_send returns the value of copied_by_peer() at which
  // that message has been read. Receiving: the same threshold for the other direction, the
  // sender's pid, and mark_copied once a message has been read (wakes the sender if it sleeps).
  size_t send_single_copy_from() const { return out_->single_copy_from.load(std::memory_order_relaxed); }
  uint64_t note_single_copy_send(size_t bytes) { return single_copy_sent_ += bytes; }
  uint64_t copied_by_peer() const { return out_->copied.load(std::memory_order_acquire); }
  size_t recv_single_copy_from() const { return in_->single_copy_from.load(std::memory_order_relaxed); }
  pid_t peer_pid() const { return static_cast<pid_t>(peer_bell_->pid.load(std::memory_order_relaxed)); }
  void mark_copied(size_t bytes);

  // Shared copies (single_copy.h). Reading: whether the peer may write into this process (its
  // probe of this rank's memory succeeded), the offer of the message whose spans arrive next
  // (`bytes` bytes, going to `dest`, in chunks of `chunk`), a claim of the next chunk from the front
  // (its index), and the bytes the peer has written into offered messages. Writing: whether this rank may
  // write into the peer, and a claim of a chunk from the back of the offer for the message that
  // ends at `message_end` (note_pushed after writing it).
  bool peer_may_write_here() const { return send_single_copy_from() > 0; }
  void offer_copy_share(uint64_t dest, size_t bytes, size_t chunk);
  bool claim_front_chunk(size_t* index);
  void withdraw_copy_share();  // claims every chunk left (the receive was abandoned)
  uint64_t pushed_by_peer() const { return in_->share.pushed.load(std::memory_order_acquire); }
  bool may_write_peer() const { return recv_single_copy_from() > 0; }
  bool claim_back_chunk(uint64_t message_end, size_t message_bytes, uint64_t* dest, size_t* offset, size_t* bytes);
  void note_pushed(size_t bytes);

 private:
  RingHeader* out_;
  uint8_t* out_data_;
  RingHeader* in_;
  uint8_t* in_data_;
  size_t cap_;
  Doorbell* peer_bell_;
  bool told_waiting_ = false;  // last value this writer stored in out_->writer_waits
  uint64_t single_copy_sent_ = 0;  // bytes of single-copy messages ever sent on out_
};

}  // namespace hs
