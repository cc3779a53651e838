// Single-copy transfers between ranks on one host: the receiver reads a large message straight out
// of the sender's memory (process_vm_readv, Linux's cross-memory attach) instead of the sender
// copying it into the shared ring and the receiver copying it out again. That halves the memory
// traffic of a large transfer, which is what bounds bandwidth on one host.
//
// The ring then carries only the message's address ranges in the sender (RemoteSpan records), and
// the receiver reports the bytes it has read in the ring's header (see RingHeader::copied), which
// is when the sender's buffer is free again. Whether a receiver may read a sender's memory (same
// user, no ptrace restriction, one PID namespace) is probed once when the rings are set up.
//
// Shared copies. A plain single-copy message is copied by the receiver's CPU alone while the
// sender's waits for it to finish: a broadcast's root, or any sender with nothing else to do, then
// idles. So when both may reach the other's memory and the message is one contiguous range going
// to one contiguous range, the receiver offers it in chunks (CopyShare in shm_segment.h): it claims
// chunks from the front and reads them (process_vm_readv), the sender claims chunks from the back
// and writes them into the receiver's buffer (process_vm_writev), and the two meet wherever their
// speeds put them. A sender that is busy elsewhere simply claims nothing, and a rank that has
// chunks of its own to write leaves the chunks offered to it for later (Transport::exchange says
// why). An exchange abandoned by an error withdraws its offers. Ordering: the sender
// writes only into chunks it claimed from an offer the receiver made for that very message, and
// counts each chunk in CopyShare::pushed after its write returns (release); the receiver finishes
// the message, and its caller may use the buffer, only once every chunk is claimed and the
// sender's share has been counted (acquire).
#pragma once
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/group.h"

namespace hs {

// One contiguous piece of a message in the sender's address space, as written to the ring.
struct RemoteSpan {
  uint64_t addr;
  uint64_t bytes;
};
static_assert(sizeof(RemoteSpan) == 16, "RemoteSpan is a wire record");

// How far the receiver of a single-copy message has got: message bytes read, bytes of the
// stream (spans and padding) consumed, and bytes already read of the first unconsumed span.
// While a shared copy is under way (`shared`), read stays 0 until it completes; meanwhile this end
// has read `own` bytes of it, and the sender's CopyShare::pushed stood at `pushed_from` at the offer.
struct SingleCopyProgress {
  size_t read = 0;
  size_t stream = 0;
  size_t skip = 0;
  bool shared = false;
  uint64_t source = 0;  // (shared) the message's one range in the sender
  size_t chunk = 0;     // (shared) the offer's chunk size
  size_t own = 0;
  uint64_t pushed_from = 0;
};

// The message [p, p + bytes) as the sender's address ranges, through `scattered` when set (its
// pieces' real addresses); neighbouring ranges merge.
void describe_spans(const uint8_t* p, size_t bytes, const ScatteredBuffer* scattered, std::vector<RemoteSpan>* spans);

// Most address ranges one read takes on either side (the kernel's UIO_MAXIOV).
constexpr size_t kMaxReadRanges = 1024;

// Copies from process `pid` the ranges `remote` (there), in order, into the ranges `local` (here),
// in order: one system call for all of them unless one stops part way. Both lists cover the same
// number of bytes, in at most kMaxReadRanges ranges each; both are consumed. Returns 0, or the
// errno that stopped it (ESRCH: the process is gone; EFAULT: a range is not mapped there; EPERM:
// not allowed).
int read_peer_memory(pid_t pid, iovec* local, size_t n_local, iovec* remote, size_t n_remote);
// The same for one range.
int read_peer_memory(pid_t pid, void* dst, uint64_t remote, size_t n);

// Copies [src, src + n) here into process `pid` at `remote`: read_peer_memory's mirror image,
// with the same errors.
int write_peer_memory(pid_t pid, const void* src, uint64_t remote, size_t n);

// A shared copy's claims word: the offer's tag (its number, modulo 2^16, so that a claim never
// lands on another offer) and the unclaimed chunks [front, back).
constexpr uint64_t kMaxSharedCopyChunks = (uint64_t(1) << 24) - 1;
inline uint64_t pack_claims(uint64_t tag, uint64_t front, uint64_t back) {
  return (tag & 0xffff) << 48 | (front & 0xffffff) << 24 | (back & 0xffffff);
}
inline uint64_t claims_tag(uint64_t c) { return c >> 48; }
inline uint64_t claims_front(uint64_t c) { return (c >> 24) & 0xffffff; }
inline uint64_t claims_back(uint64_t c) { return c & 0xffffff; }

// A shared copy's chunks are at least this large, and a message is offered as one only when it
// holds two of them: below that there is nothing to share (messages are single-copy from
// 512 KiB by default anyway, HOROVOD_SHM_SINGLE_COPY_BYTES).
constexpr size_t kMinSharedCopyChunk = 256 << 10;
constexpr size_t kMaxSharedCopyChunk = 1 << 20;
// The chunk of a shared copy of `bytes`: about 1/16 of it, within [kMinSharedCopyChunk,
// kMaxSharedCopyChunk]. The two ends finish at most one chunk apart, so 16 chunks keep that tail
// near 1/32 of the message on average; every claim costs a system call and a compare-and-swap on a
// cache line both ends write, about 2 µs (32 MiB read in 1 MiB calls took 1% longer than in one
// call), some 5% of copying a 256 KiB chunk; past 1 MiB a bigger chunk saves nothing that matters
// and lengthens the tail.
size_t shared_copy_chunk(size_t bytes);

// True when this process can read `expected` at `remote` in process `pid`: the probe that decides
// whether a pair of ranks uses single-copy transfers.
bool can_read_peer_memory(pid_t pid, uint64_t remote, uint64_t expected);

// "<call>: <strerror>" with a hint for EPERM.
std::string peer_memory_error(int err, const char* call = "process_vm_readv");

}  // namespace hs
