#include "collectives/scratch.h"

#include <cstdlib>
#include <new>
#include <stdexcept>

namespace hs {
namespace {

// Buffers up to this size stay cached for the next call; larger ones are freed after use.
constexpr size_t kKeepBytes = 64 * 1024 * 1024;

struct ThreadScratch {
  char* data = nullptr;
  size_t capacity = 0;
  bool leased = false;
  ~ThreadScratch() { std::free(data); }
};

thread_local ThreadScratch tls;

}  // namespace

ScratchLease::ScratchLease(size_t bytes) {
  if (tls.leased) throw std::logic_error("ScratchLease: nested lease on one thread");
  if (bytes > tls.capacity) {
    std::free(tls.data);
    tls.data = nullptr;
    tls.capacity = 0;
    const size_t cap = align_up(bytes);
    tls.data = static_cast<char*>(std::aligned_alloc(64, cap));
    if (tls.data == nullptr) throw std::bad_alloc();
    tls.capacity = cap;
  }
  tls.leased = true;
  data_ = tls.data;
}

ScratchLease::~ScratchLease() {
  tls.leased = false;
  if (tls.capacity > kKeepBytes) {
    std::free(tls.data);
    tls.data = nullptr;
    tls.capacity = 0;
  }
}

}  // namespace hs
