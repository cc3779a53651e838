// Single-copy transfers between ranks on one host: the receiver reads a large message straight out
// of the sender's memory (process_vm_readv, Linux's cross-memory attach) instead of the sender
// copying it into the shared ring and the receiver copying it out again. That halves the memory
// traffic of a large transfer, which is what bounds bandwidth on one host.
//
// The ring then carries only the message's address ranges in the sender (RemoteSpan records), and
// the receiver reports the bytes it has read in the ring's header (see RingHeader::copied), which
// is when the sender's buffer is free again. Whether a receiver may read a sender's memory (same
// user, no ptrace restriction, one PID namespace) is probed once when the rings are set up.
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
struct SingleCopyProgress {
  size_t read = 0;
  size_t stream = 0;
  size_t skip = 0;
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

// True when this process can read `expected` at `remote` in process `pid`: the probe that decides
// whether a pair of ranks uses single-copy transfers.
bool can_read_peer_memory(pid_t pid, uint64_t remote, uint64_t expected);

// "process_vm_readv from rank X: <strerror>" with a hint for EPERM.
std::string peer_memory_error(int err);

}  // namespace hs
