// Asymmetric fences for the shared-memory wake-up protocol (shm_segment.cc). Each side of a
// "store, fence, load" pair (a writer publishes data and then looks whether its reader sleeps; the
// reader announces that it sleeps and then looks for data) needs a full fence, so that not both
// loads miss the other side's store. The writer's side runs on every message and the reader's
// only before a sleep, so the writer's fence is made free (a compiler barrier) and the sleeper's
// made heavy: membarrier(2) makes every running thread of every registered process pass a full
// barrier, which serves as the writer's fence. A seq_cst fence costs a small message about a
// tenth of a microsecond (it waits for the message's stores to drain), a membarrier a few
// microseconds, paid only by a thread about to sleep.
//
// Where the kernel (or a seccomp policy) refuses membarrier, both sides use seq_cst fences.
#pragma once
#include <atomic>

namespace hs {

// Whether this process registered for membarrier's global expedited barriers and one worked.
bool heavy_fence_available();

// The frequent side: a compiler barrier where heavy_fence() is available, a full fence otherwise.
inline void light_fence() {
  if (heavy_fence_available()) std::atomic_signal_fence(std::memory_order_seq_cst);
  else std::atomic_thread_fence(std::memory_order_seq_cst);
}

// The rare side: a full fence here and in every running thread of every registered process.
void heavy_fence();

}  // namespace hs
