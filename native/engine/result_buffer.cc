#include "engine/result_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <utility>

namespace hs {
namespace {

// Blocks of at least this many bytes are page aligned and asked for transparent huge pages: one
// fault per 2 MiB instead of per 4 KiB the first time a block is filled.
constexpr size_t kHugePageBytes = 2u << 20;

// Smaller results bypass the pool: malloc recycles them from its own free lists without faults or
// zeroing, and keeping blocks of every small size a job happens to gather would hold memory that
// malloc could have reused for anything.
constexpr size_t kPooledResultBytes = 1u << 20;

class Pool {
 public:
  uint8_t* take(size_t bytes) {
    if (bytes < kPooledResultBytes) {
      void* p = std::malloc(bytes);
      if (!p) throw std::bad_alloc();
      return static_cast<uint8_t*>(p);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = idle_.find(bytes);
      if (it != idle_.end()) {
        uint8_t* p = it->second;
        idle_.erase(it);
        idle_bytes_ -= bytes;
        return p;
      }
    }
    void* p = nullptr;
    if (bytes >= kHugePageBytes) {
      if (posix_memalign(&p, kHugePageBytes, bytes) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
      madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without it the block still works
#endif
    } else {
      p = std::malloc(bytes);
      if (!p) throw std::bad_alloc();
    }
    return static_cast<uint8_t*>(p);
  }

  void give(uint8_t* p, size_t bytes) {
    if (bytes < kPooledResultBytes) {
      std::free(p);
      return;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (bytes <= kIdleResultBytes) {
        // Make room by dropping the largest idle blocks first: the block just released is the
        // one a loop is most likely to ask for next.
        while (idle_bytes_ + bytes > kIdleResultBytes && !idle_.empty()) {
          auto last = std::prev(idle_.end());
          std::free(last->second);
          idle_bytes_ -= last->first;
          idle_.erase(last);
        }
        idle_.emplace(bytes, p);
        idle_bytes_ += bytes;
        return;
      }
    }
    std::free(p);
  }

  size_t idle_bytes() {
    std::lock_guard<std::mutex> l(mu_);
    return idle_bytes_;
  }

 private:
  std::mutex mu_;
  std::multimap<size_t, uint8_t*> idle_;
  size_t idle_bytes_ = 0;
};

// Never destroyed: result arrays can outlive the module's static destructors at interpreter exit.
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

ResultBuffer::~ResultBuffer() { release(); }

ResultBuffer::ResultBuffer(ResultBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ResultBuffer& ResultBuffer::operator=(ResultBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void ResultBuffer::resize(size_t bytes) {
  release();
  if (bytes == 0) return;
  data_ = pool().take(bytes);
  size_ = bytes;
}

void ResultBuffer::release() {
  if (data_) pool().give(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

size_t idle_result_bytes() { return pool().idle_bytes(); }

}  // namespace hs
