#include "transport/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace hs {

namespace {
long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

// Decided once per process, at load: every process of a job registers before any link exists,
// so no writer that skips its fence meets a sleeper whose barrier does not reach it.
const bool kAvailable =
    membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0 && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}  // namespace

bool heavy_fence_available() { return kAvailable; }

void heavy_fence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (kAvailable) membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
}

}  // namespace hs
