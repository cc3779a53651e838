// Splitting a buffer into per-rank pieces. Header-only: a handful of arithmetic helpers.
#pragma once
#include <cstddef>
#include <vector>

namespace hs {

// A run of elements (or bytes, where the unit is 1) within a buffer.
struct Segment {
  size_t offset = 0;
  size_t count = 0;
  size_t end() const { return offset + count; }
};

// The canonical split of `count` elements over n ranks: as even as possible, earlier ranks get
// the remainder (the same rule reducescatter uses for dim 0, so 1-D tensors line up exactly).
inline std::vector<Segment> even_partition(size_t count, int n) {
  std::vector<Segment> seg(static_cast<size_t>(n));
  const size_t base = count / size_t(n), extra = count % size_t(n);
  size_t off = 0;
  for (size_t i = 0; i < seg.size(); ++i) {
    seg[i].offset = off;
    seg[i].count = base + (i < extra ? 1 : 0);
    off += seg[i].count;
  }
  return seg;
}

// Consecutive segments of the given sizes.
inline std::vector<Segment> prefix_partition(const std::vector<size_t>& counts) {
  std::vector<Segment> seg(counts.size());
  size_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    seg[i] = Segment{off, counts[i]};
    off += counts[i];
  }
  return seg;
}

inline Segment intersect(const Segment& a, const Segment& b) {
  const size_t lo = a.offset > b.offset ? a.offset : b.offset;
  const size_t hi = a.end() < b.end() ? a.end() : b.end();
  return hi > lo ? Segment{lo, hi - lo} : Segment{lo, 0};
}

inline bool contains(const Segment& outer, const Segment& inner) {
  return inner.count == 0 || (inner.offset >= outer.offset && inner.end() <= outer.end());
}

// a mod n for possibly negative a.
inline int wrap(int a, int n) { return ((a % n) + n) % n; }

}  // namespace hs
