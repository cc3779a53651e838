#include "transport/single_copy.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hs {

namespace {
// Drops the first n bytes of the ranges [*v, *v + *count).
void advance(iovec*& v, size_t& count, size_t n) {
  while (n > 0 && count > 0) {
    size_t k = std::min(n, v->iov_len);
    v->iov_base = static_cast<char*>(v->iov_base) + k;
    v->iov_len -= k;
    n -= k;
    if (v->iov_len == 0) {
      ++v;
      --count;
    }
  }
  while (count > 0 && v->iov_len == 0) {
    ++v;
    --count;
  }
}
}  // namespace

int read_peer_memory(pid_t pid, iovec* local, size_t n_local, iovec* remote, size_t n_remote) {
  advance(local, n_local, 0);
  advance(remote, n_remote, 0);
  while (n_local > 0 && n_remote > 0) {
    ssize_t k = process_vm_readv(pid, local, n_local, remote, n_remote, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (k == 0) return EFAULT;  // a partial read that cannot advance: the rest is not mapped
    advance(local, n_local, static_cast<size_t>(k));
    advance(remote, n_remote, static_cast<size_t>(k));
  }
  return 0;
}

int read_peer_memory(pid_t pid, void* dst, uint64_t remote, size_t n) {
  iovec here = {dst, n};
  iovec there = {reinterpret_cast<void*>(static_cast<uintptr_t>(remote)), n};
  return read_peer_memory(pid, &here, 1, &there, 1);
}

int write_peer_memory(pid_t pid, const void* src, uint64_t remote, size_t n) {
  iovec here = {const_cast<void*>(src), n};
  iovec there = {reinterpret_cast<void*>(static_cast<uintptr_t>(remote)), n};
  while (here.iov_len > 0) {
    ssize_t k = process_vm_writev(pid, &here, 1, &there, 1, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (k == 0) return EFAULT;  // as in read_peer_memory
    here.iov_base = static_cast<char*>(here.iov_base) + k;
    here.iov_len -= static_cast<size_t>(k);
    there.iov_base = static_cast<char*>(there.iov_base) + k;
    there.iov_len -= static_cast<size_t>(k);
  }
  return 0;
}

size_t shared_copy_chunk(size_t bytes) { return std::clamp(bytes / 16, kMinSharedCopyChunk, kMaxSharedCopyChunk); }

void describe_spans(const uint8_t* p, size_t bytes, const ScatteredBuffer* scattered, std::vector<RemoteSpan>* spans) {
  spans->clear();
  for (size_t off = 0; off < bytes;) {
    const uint8_t* src = p + off;
    size_t len = bytes - off;
    if (scattered) scattered->map(src, len);
    const uint64_t addr = reinterpret_cast<uintptr_t>(src);
    if (!spans->empty() && spans->back().addr + spans->back().bytes == addr) spans->back().bytes += len;
    else spans->push_back({addr, len});
    off += len;
  }
}

bool can_read_peer_memory(pid_t pid, uint64_t remote, uint64_t expected) {
  uint64_t seen = ~expected;
  return pid > 0 && remote != 0 && read_peer_memory(pid, &seen, remote, sizeof(seen)) == 0 && seen == expected;
}

std::string peer_memory_error(int err, const char* call) {
  std::string text = std::string(call) + ": " + std::strerror(err);
  if (err == EPERM) text += " (HOROVOD_SHM_SINGLE_COPY_BYTES=0 turns single-copy transfers off)";
  return text;
}

}  // namespace hs
