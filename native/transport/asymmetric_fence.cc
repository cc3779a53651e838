#include "transport/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace hs {

namespace {
long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

bool register_this_process() {
  return membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0 && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}

// Decided per process, at load: every process of a job registers before any link exists, so no
// writer that skips its fence meets a sleeper whose barrier does not reach it. A registration
// belongs to one process, so a child forked after the load registers again (or falls back to full
// fences) before it runs anything else.
bool available = [] {
  pthread_atfork(nullptr, nullptr, [] { available = register_this_process(); });
  return register_this_process();
}();
}  // namespace

bool heavy_fence_available() { return available; }

void heavy_fence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (available) membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
}

}  // namespace hs
