#include "engine/cached_lane.h"

#include <algorithm>

namespace hs {

void CachedLane::add_id(int32_t id, int32_t tensor) {
  if (static_cast<size_t>(id) >= waits_.size()) waits_.resize(static_cast<size_t>(id) + 1);
  Wait& w = waits_[static_cast<size_t>(id)];
  w.sent.assign(static_cast<size_t>(size_), kNotSent);
  w.tensor = tensor;
  if (static_cast<size_t>(tensor) >= waiting_by_tensor_.size())
    waiting_by_tensor_.resize(static_cast<size_t>(tensor) + 1, -1);
}

CachedLane::Outcome CachedLane::add(int rank, int32_t id, int64_t spec_seq) {
  Wait& w = waits_[static_cast<size_t>(id)];
  int32_t& current = waiting_by_tensor_[static_cast<size_t>(w.tensor)];
  if ((current >= 0 && current != id) || w.sent[static_cast<size_t>(rank)] != kNotSent) return Outcome::kDeclined;
  const bool early = spec_seq >= 0;
  if (early && w.early > 0 && spec_seq != w.seq) return Outcome::kDeclined;
  if (w.count == size_ - 1) {  // the last rank: complete without recording anything
    const int early_ranks = w.early + (early ? 1 : 0);
    if (early_ranks != 0 && early_ranks != size_) return Outcome::kDeclined;  // a mix: see the header
    clear(id);
    return early_ranks ? Outcome::kSpeculated : Outcome::kComplete;
  }
  if (w.count == 0) {
    w.first_seen = CoarseClock::now();
    w.pos = waiting_.size();
    waiting_.push_back(id);
    current = id;
  }
  w.sent[static_cast<size_t>(rank)] = early ? spec_seq : -1;
  ++w.count;
  if (early) {
    ++w.early;
    w.seq = spec_seq;
  }
  return Outcome::kWaiting;
}

int32_t CachedLane::waiting_id(int32_t tensor) const {
  return static_cast<size_t>(tensor) < waiting_by_tensor_.size() ? waiting_by_tensor_[static_cast<size_t>(tensor)] : -1;
}

std::vector<CachedLane::Sent> CachedLane::take(int32_t id) {
  std::vector<Sent> ranks;
  const Wait& w = waits_[static_cast<size_t>(id)];
  for (int r = 0; r < size_; ++r)
    if (w.sent[static_cast<size_t>(r)] != kNotSent) ranks.push_back(Sent{r, w.sent[static_cast<size_t>(r)]});
  clear(id);
  return ranks;
}

void CachedLane::clear(int32_t id) {
  Wait& w = waits_[static_cast<size_t>(id)];
  if (w.count == 0) return;
  std::fill(w.sent.begin(), w.sent.end(), kNotSent);
  w.count = 0;
  w.early = 0;
  w.seq = -1;
  waiting_by_tensor_[static_cast<size_t>(w.tensor)] = -1;
  // Swap-remove from waiting_, keeping the moved id's position current.
  int32_t last = waiting_.back();
  waiting_[w.pos] = last;
  waits_[static_cast<size_t>(last)].pos = w.pos;
  waiting_.pop_back();
}

}  // namespace hs
