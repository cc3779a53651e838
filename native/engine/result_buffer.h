// Memory for results the core allocates (allgather, alltoall, reducescatter outputs), handed to
// the caller without a copy and recycled when the caller lets go of it.
//
// A fresh large block costs more than the collective that fills it: the kernel maps and zeroes
// every page on first touch (a 128 MiB allgather output is 32768 page faults), and a
// std::vector would zero it once more. Training loops gather tensors of the same size step after
// step, so a block the caller has released is kept, uninitialised, for the next result of that
// size; at most kIdleResultBytes stay idle, so a one-off large result is not kept for good.
// Results under 1 MiB come from malloc directly (result_buffer.cc says why).
#pragma once
#include <cstddef>
#include <cstdint>

namespace hs {

// Idle bytes kept for reuse, process-wide: one 64 MiB-per-rank allgather output of 2 ranks
// (what a benchmark or a large embedding gather alternates between) plus room for smaller ones.
constexpr size_t kIdleResultBytes = 256u << 20;

class ResultBuffer {
 public:
  ResultBuffer() = default;
  ~ResultBuffer();
  ResultBuffer(ResultBuffer&& other) noexcept;
  ResultBuffer& operator=(ResultBuffer&& other) noexcept;
  ResultBuffer(const ResultBuffer&) = delete;
  ResultBuffer& operator=(const ResultBuffer&) = delete;

  // Replaces the contents with `bytes` uninitialised bytes (a recycled block when one of that
  // size is idle).
  void resize(size_t bytes);
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Blocks now idle in the pool, for tests and stats.
size_t idle_result_bytes();

}  // namespace hs
