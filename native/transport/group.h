// The point-to-point face that every collective algorithm is written against. A Group is an
// ordered set of ranks (the global set or a process set); peers are addressed by index in it.
// Which transport carries a pair (shared memory on one host, TCP between hosts) is invisible here.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>
#include "common/dtype.h"

namespace hs {

struct SendSpec {
  int peer;            // index in the group
  const void* data;
  size_t bytes;
};

enum class RecvMode { kCopy, kReduce };

struct RecvSpec {
  int peer;            // index in the group
  void* dest;
  size_t bytes;
  RecvMode mode = RecvMode::kCopy;
  // kReduce only: dest[i] = local[i] (op) incoming[i]; local may equal dest. Element-aligned
  // pieces are reduced as they arrive, straight out of the transport's buffer (no staging copy
  // on shared memory).
  const void* local = nullptr;
  DataType dtype = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  // kReduce only: dest[i] = incoming[i] (op) local[i] instead. Two ranks reducing each other's
  // data pass the lower rank's operand first on both sides, so both get the same bits even where
  // op is not exactly commutative (Min/Max with NaN, the payload of NaN + NaN).
  bool incoming_first = false;
  // kReduce only: then dest[i] *= postscale (scale_buffer), while the reduced piece is still in
  // cache; an allreduce's last reduction uses it instead of a pass over the whole result.
  double postscale = 1.0;
};

// An address range [base, base + bytes) that stands for memory scattered elsewhere: the piece
// starting `start[i]` bytes in lives at `where[i]` and runs to the next piece's start (the last to
// `bytes`). A fused allreduce hands its algorithm such a range as its buffer, and the transport
// moves every byte straight to and from the tensors: no staging copy through a fusion buffer.
// Pieces hold whole elements; only transfers may touch the range (see Group::scatter_through).
struct ScatteredBuffer {
  const uint8_t* base = nullptr;
  size_t bytes = 0;
  std::vector<size_t> start;  // strictly ascending, start[0] == 0
  std::vector<uint8_t*> where;
  bool contains(const void* p) const {
    auto* q = static_cast<const uint8_t*>(p);
    return q >= base && q < base + bytes;
  }
  // For p inside the range: its real address, and how many bytes from there stay in one piece.
  std::pair<uint8_t*, size_t> resolve(const void* p) const;
  // A transfer of n bytes at p: p inside the range becomes the address it stands for and n shrinks
  // to the end of that piece; anything else is left as it is.
  template <class T>
  void map(T*& p, size_t& n) const {
    if (!contains(p)) return;
    auto piece = resolve(p);
    p = piece.first;
    n = std::min(n, piece.second);
  }
};

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;   // my index
  virtual int size() const = 0;
  virtual int global_rank(int index) const = 0;
  // Runs every send and receive concurrently and returns when all are complete. Messages between
  // one ordered pair are delivered in the order their exchange() calls were made; within one call a
  // pair may carry at most one send each way. Throws TransportError on a dead peer or timeout.
  virtual void exchange(const std::vector<SendSpec>& sends, const std::vector<RecvSpec>& recvs) = 0;
  // While set (non-null), sends and receives whose addresses fall in `b`'s range go to its pieces.
  // False when this group cannot (the caller then stages through a contiguous buffer).
  virtual bool scatter_through(const ScatteredBuffer* b) { return b == nullptr; }
};

// Sets a group's scattered buffer for the lifetime of this object; ok() says whether it took.
class ScatterScope {
 public:
  ScatterScope(Group& g, const ScatteredBuffer* b) : g_(g), ok_(g.scatter_through(b)) {}
  ~ScatterScope() {
    if (ok_) g_.scatter_through(nullptr);
  }
  bool ok() const { return ok_; }
  ScatterScope(const ScatterScope&) = delete;
  ScatterScope& operator=(const ScatterScope&) = delete;

 private:
  Group& g_;
  bool ok_;
};

}  // namespace hs
