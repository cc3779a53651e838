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

#include <cstddef>
#include <cstdint>
#include <string>

namespace hs {

// One contiguous piece of a message in the sender's address space, as written to the ring.
struct RemoteSpan {
  uint64_t addr;
  uint64_t bytes;
};
static_assert(sizeof(RemoteSpan) == 16, "RemoteSpan is a wire record");

// Copies n bytes at `remote` in process `pid` to `dst`. Returns 0, or the errno that stopped it
// (ESRCH: the process is gone; EFAULT: the range is not mapped there; EPERM: not allowed).
int read_peer_memory(pid_t pid, void* dst, uint64_t remote, size_t n);

// True when this process can read `expected` at `remote` in process `pid`: the probe that decides
// whether a pair of ranks uses single-copy transfers.
bool can_read_peer_memory(pid_t pid, uint64_t remote, uint64_t expected);

// "process_vm_readv from rank X: <strerror>" with a hint for EPERM.
std::string peer_memory_error(int err);

}  // namespace hs
