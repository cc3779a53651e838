#include "transport/single_copy.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace hs {

int read_peer_memory(pid_t pid, void* dst, uint64_t remote, size_t n) {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    struct iovec local = {out, n};
    struct iovec far = {reinterpret_cast<void*>(static_cast<uintptr_t>(remote)), n};
    ssize_t k = process_vm_readv(pid, &local, 1, &far, 1, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (k == 0) return EFAULT;  // a partial read that cannot advance: the rest is not mapped
    out += k;
    remote += static_cast<uint64_t>(k);
    n -= static_cast<size_t>(k);
  }
  return 0;
}

bool can_read_peer_memory(pid_t pid, uint64_t remote, uint64_t expected) {
  uint64_t seen = ~expected;
  return pid > 0 && remote != 0 && read_peer_memory(pid, &seen, remote, sizeof(seen)) == 0 && seen == expected;
}

std::string peer_memory_error(int err) {
  std::string text = std::string("process_vm_readv: ") + std::strerror(err);
  if (err == EPERM) text += " (HOROVOD_SHM_SINGLE_COPY_BYTES=0 turns single-copy transfers off)";
  return text;
}

}  // namespace hs
