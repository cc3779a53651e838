// Per-thread reusable working memory for collectives. Allocating fresh buffers per call would
// page-fault every page on first touch, which costs more than the copy itself at these sizes.
#pragma once
#include <cstddef>

namespace hs {

// Rounds up to a cache line, for carving one scratch allocation into several buffers.
constexpr size_t align_up(size_t bytes) { return (bytes + 63) & ~size_t(63); }

// Borrows this thread's scratch buffer (at least `bytes`, 64-byte aligned) for the lifetime of
// the object. Not reentrant: one lease per thread at a time. Large buffers are released again
// when the lease ends, so one huge reducescatter does not pin memory for the process lifetime.
class ScratchLease {
 public:
  explicit ScratchLease(size_t bytes);
  ~ScratchLease();
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  char* data() const { return data_; }

 private:
  char* data_;
};

}  // namespace hs
