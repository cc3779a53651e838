// The coordinator's steady-state lane. In a training loop every step submits the same tensors with
// the same signatures, so each arrives as a response-cache id. For those (global process set, no
// rank joined) the coordinator only needs to know which ranks sent which id: one flag per rank
// and a count, kept per id, instead of a copy of every rank's request in a Pending entry. An id is
// complete once every rank sent it; anything unusual (a second id for the same tensor, a rank
// sending the same id twice, a slow request for the tensor, a join, a long wait) hands the partial
// entry back to the general path, which validates, defers and warns as usual.
//
// Speculative small allreduces (Engine::try_speculate) take the lane too, each rank's submission
// with its op number: when every rank sent the id as the same op, the id is complete and no
// response is due (each rank finished on its own). That is the steady state of a loop of small
// blocking allreduces, and rank 0 then keeps no per-rank copy of the request at all. A mix (some
// ranks early, others not, or different op numbers) is unusual: the general path answers it with
// the list of ranks that sent early.
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

  // kSpeculated: complete, and every rank sent its input early as the same op (no response due).
  enum class Outcome { kWaiting, kComplete, kSpeculated, kDeclined };
  // `rank` sent cache id `id`, early as op number `spec_seq` (>= 0) or not (-1). kDeclined:
  // another id of the same tensor is waiting, this rank already sent `id`, or the ranks' early and
  // plain submissions (or their op numbers) differ; the caller then hands the tensor to the general
  // path, where take() gives it every rank's op number.
  Outcome add(int rank, int32_t id, int64_t spec_seq = -1);

  // The id of `tensor` that some ranks sent and others not yet, or -1.
  int32_t waiting_id(int32_t tensor) const;
  // Ids with a partial entry, and how long ago each was first sent.
  const std::vector<int32_t>& waiting() const { return waiting_; }
  CoarseClock::time_point first_seen(int32_t id) const { return waits_[id].first_seen; }
  bool has(int32_t id, int rank) const { return waits_[id].sent[rank] != kNotSent; }
  struct Sent {
    int rank;
    int64_t spec_seq;  // -1: not early
  };
  // Clear `id`'s partial entry; returns the ranks that had sent it.
  std::vector<Sent> take(int32_t id);

 private:
  static constexpr int64_t kNotSent = -2;
  struct Wait {
    std::vector<int64_t> sent;  // by rank: kNotSent, -1 (sent, not early) or the early op number
    int count = 0;
    int early = 0;     // how many of them sent early
    int64_t seq = -1;  // their op number (all the same, or add() declined)
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
