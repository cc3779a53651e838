#include "engine/cached_lane.h"

#include <algorithm>

namespace hs {

void CachedLane::add_id(int32_t id, int32_t tensor) {
  if (static_cast<size_t>(id) >= waits_.size()) waits_.resize(static_cast<size_t>(id) + 1);
  Wait& w = waits_[static_cast<size_t>(id)];
  w.by_rank.assign(static_cast<size_t>(size_), 0);
  w.tensor = tensor;
  if (static_cast<size_t>(tensor) >= waiting_by_tensor_.size())
    waiting_by_tensor_.resize(static_cast<size_t>(tensor) + 1, -1);
}

CachedLane::Outcome CachedLane::add(int rank, int32_t id) {
  Wait& w = waits_[static_cast<size_t>(id)];
  int32_t& current = waiting_by_tensor_[static_cast<size_t>(w.tensor)];
  if ((current >= 0 && current != id) || w.by_rank[static_cast<size_t>(rank)]) return Outcome::kDeclined;
  if (w.count == size_ - 1) {  // the last rank: complete without recording anything
    clear(id);
    return Outcome::kComplete;
  }
  if (w.count == 0) {
    w.first_seen = CoarseClock::now();
    w.pos = waiting_.size();
    waiting_.push_back(id);
    current = id;
  }
  w.by_rank[static_cast<size_t>(rank)] = 1;
  ++w.count;
  return Outcome::kWaiting;
}

int32_t CachedLane::waiting_id(int32_t tensor) const {
  return static_cast<size_t>(tensor) < waiting_by_tensor_.size() ? waiting_by_tensor_[static_cast<size_t>(tensor)] : -1;
}

std::vector<int> CachedLane::take(int32_t id) {
  std::vector<int> ranks;
  const Wait& w = waits_[static_cast<size_t>(id)];
  for (int r = 0; r < size_; ++r)
    if (w.by_rank[static_cast<size_t>(r)]) ranks.push_back(r);
  clear(id);
  return ranks;
}

void CachedLane::clear(int32_t id) {
  Wait& w = waits_[static_cast<size_t>(id)];
  if (w.count == 0) return;
  std::fill(w.by_rank.begin(), w.by_rank.end(), 0);
  w.count = 0;
  waiting_by_tensor_[static_cast<size_t>(w.tensor)] = -1;
  // Swap-remove from waiting_, keeping the moved id's position current.
  int32_t last = waiting_.back();
  waiting_[w.pos] = last;
  waits_[static_cast<size_t>(last)].pos = w.pos;
  waiting_.pop_back();
}

}  // namespace hs
