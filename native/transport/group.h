// The point-to-point face that every collective algorithm is written against. A Group is an
// ordered set of ranks (the global set or a process set); peers are addressed by index in it.
// Which transport carries a pair (shared memory on one host, TCP between hosts) is invisible here.
#pragma once
#include <cstddef>
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
};

}  // namespace hs
