// The coordinator's steady-state lane. In a training loop every step submits the same tensors with
// the same signatures, so each arrives as a response-cache id. For those (global process set, no
// rank joined) the coordinator only needs to know which ranks sent which id: one flag per rank
// and a count, kept per id, instead of a copy of every rank's request in a Pending entry. An id is
// complete once every rank sent it; anything unusual (a second id for the same tensor, a rank
// sending the same id twice, a slow request for the tensor, a join, a long wait) hands the partial
// entry back to the general path, which validates, defers and warns as usual.
#pragma once
#include <cstdint>
#include <vector>

#include "common/clock.h"

namespace hs {

class CachedLane {
 public:
  explicit CachedLane(int size) : size_(size) {}

  // Register cache id `id` (ids are dense, assigned in order) for the tensor numbered `tensor`:
  // ids of the same tensor name (different signatures over time) share the number.
  void add_id(int32_t id, int32_t tensor);

  enum class Outcome { kWaiting, kComplete, kDeclined };
  // `rank` sent cache id `id`. kDeclined: another id of the same tensor is waiting, or this rank
  // already sent `id`; the caller then hands the tensor to the general path.
  Outcome add(int rank, int32_t id);

  // The id of `tensor` that some ranks sent and others not yet, or -1.
  int32_t waiting_id(int32_t tensor) const;
  // Ids with a partial entry, and how long ago each was first sent.
  const std::vector<int32_t>& waiting() const { return waiting_; }
  CoarseClock::time_point first_seen(int32_t id) const { return waits_[id].first_seen; }
  bool has(int32_t id, int rank) const { return waits_[id].by_rank[rank] != 0; }
  // Clear `id`'s partial entry; returns the ranks that had sent it.
  std::vector<int> take(int32_t id);

 private:
  struct Wait {
    std::vector<uint8_t> by_rank;
    int count = 0;
    int32_t tensor = -1;
    size_t pos = 0;  // index in waiting_ while count > 0
    CoarseClock::time_point first_seen;
  };
  void clear(int32_t id);

  int size_;
  std::vector<Wait> waits_;                 // by cache id
  std::vector<int32_t> waiting_by_tensor_;  // by tensor number: the id with a partial entry, or -1
  std::vector<int32_t> waiting_;            // ids with a partial entry
};

}  // namespace hs
