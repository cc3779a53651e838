// Reducescatter whose block is bit-identical to the same slice of allreduce on the same inputs,
// for any counts (a float sum depends on the order it is added in, and the order is what the
// algorithm fixes):
// - it switches between direct and ring at the same total size as allreduce (tuning.h);
// - direct: rank r receives block r from every peer and folds them in rank order, exactly the
//   per-element order of allreduce's direct path;
// - ring: it runs allreduce's reduce-scatter over allreduce's layout (even_partition, same lanes)
//   rather than over `counts`, because in a ring the order an element is accumulated in depends
//   on which rank owns it. Afterwards one exchange moves each reduced piece to the rank whose
//   block contains it. When the blocks equal the even partition (every 1-D tensor) that exchange
//   is empty and the ring writes straight into `out`; for row-split tensors it moves less than a
//   row per boundary.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/checks.h"
#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "collectives/rank_order.h"
#include "collectives/ring.h"
#include "collectives/scratch.h"
#include "collectives/tuning.h"

namespace hs {
namespace {

void reducescatter_direct(Group& g, const char* in, char* out, const std::vector<Segment>& block, DataType dtype,
                          ReduceOp op) {
  const int n = g.size(), r = g.rank();
  const size_t es = dtype_size(dtype);
  const Segment& mine = block[size_t(r)];
  const size_t slot = align_up(mine.count * es);
  ScratchLease scratch(slot * size_t(n));
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  std::vector<const void*> srcs(size_t(n), in + mine.offset * es);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    const Segment& theirs = block[size_t(p)];
    if (theirs.count > 0) sends.push_back(SendSpec{p, in + theirs.offset * es, theirs.count * es});
    if (mine.count > 0) {
      RecvSpec rs;
      rs.peer = p;
      rs.dest = scratch.data() + slot * size_t(p);
      rs.bytes = mine.count * es;
      recvs.push_back(rs);
      srcs[size_t(p)] = rs.dest;
    }
  }
  if (!sends.empty() || !recvs.empty()) g.exchange(sends, recvs);
  reduce_in_rank_order(out, srcs, mine.count, dtype, op);
}

void reducescatter_ring(Group& g, const char* in, char* out, const std::vector<Segment>& block, size_t total,
                        DataType dtype, ReduceOp op) {
  const int n = g.size(), r = g.rank();
  const size_t es = dtype_size(dtype);
  const std::vector<Segment> owned = even_partition(total, n);  // allreduce's layout
  const auto lanes = make_lanes(owned, n, total * es >= tuning::kBidirectionalRingBytes);
  const Segment& mine = owned[size_t(r)];
  const bool direct_to_out = contains(block[size_t(r)], mine);

  // Scratch: two alternating partial-sum slots per lane (the one being forwarded and the one
  // being received), plus room for this rank's reduced piece if it does not fit in `out`.
  std::vector<size_t> slot_bytes(lanes.size());
  size_t need = direct_to_out ? 0 : align_up(mine.count * es);
  for (size_t l = 0; l < lanes.size(); ++l) {
    for (const Segment& s : lanes[l].seg) slot_bytes[l] = std::max(slot_bytes[l], s.count * es);
    slot_bytes[l] = align_up(slot_bytes[l]);
    need += 2 * slot_bytes[l];
  }
  ScratchLease scratch(need);
  std::vector<char*> slots;
  char* cursor = scratch.data();
  for (size_t l = 0; l < lanes.size(); ++l) {
    slots.push_back(cursor);
    slots.push_back(cursor + slot_bytes[l]);
    cursor += 2 * slot_bytes[l];
  }
  // Where the reduced piece `mine` lands: inside `out` when it lies within this rank's block.
  char* const result = direct_to_out ? out + (mine.offset - block[size_t(r)].offset) * es : cursor;

  ring_reduce_scatter(g, lanes, in, dtype, op, [&](size_t l, int owner) -> char* {
    const Segment& seg = lanes[l].seg[size_t(owner)];
    if (owner == r) return result + (seg.offset - mine.offset) * es;
    // The segment owned by `owner` arrives at step dir*(r-owner) - 2 (mod n); consecutive steps
    // alternate slots so the partial being forwarded is never the one being written.
    const int step = wrap(lanes[l].dir * (r - owner), n) - 2;
    return slots[2 * l + size_t(step & 1)];
  });

  // Move every reduced piece to the rank whose block holds it.
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  for (int p = 0; p < n; ++p) {
    const Segment to_p = intersect(mine, block[size_t(p)]);
    const Segment from_p = intersect(owned[size_t(p)], block[size_t(r)]);
    if (p == r) {
      if (!direct_to_out && to_p.count > 0) {
        std::memcpy(out + (to_p.offset - block[size_t(r)].offset) * es, result + (to_p.offset - mine.offset) * es,
                    to_p.count * es);
      }
      continue;
    }
    if (to_p.count > 0) {
      sends.push_back(SendSpec{p, result + (to_p.offset - mine.offset) * es, to_p.count * es});
    }
    if (from_p.count > 0) {
      RecvSpec rs;
      rs.peer = p;
      rs.dest = out + (from_p.offset - block[size_t(r)].offset) * es;
      rs.bytes = from_p.count * es;
      recvs.push_back(rs);
    }
  }
  if (!sends.empty() || !recvs.empty()) g.exchange(sends, recvs);
}

}  // namespace

void reducescatter(Group& g, const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                   ReduceOp op) {
  check_group(g, "reducescatter");
  check_dtype(dtype, "reducescatter");
  check_reduce_op(op, "reducescatter");
  check_per_rank(counts, g.size(), "reducescatter", "counts");
  const std::vector<Segment> block = prefix_partition(counts);
  const size_t total = block.back().end(), es = dtype_size(dtype);
  check_buffer(in, total * es, "reducescatter", "input");
  check_buffer(out, counts[size_t(g.rank())] * es, "reducescatter", "output");
  if (total == 0) return;
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  if (g.size() == 1) {
    if (src != dst) std::memcpy(dst, src, total * es);
    return;
  }
  if (total * es <= tuning::kDirectReduceBytes) {
    reducescatter_direct(g, src, dst, block, dtype, op);
  } else {
    reducescatter_ring(g, src, dst, block, total, dtype, op);
  }
}

}  // namespace hs
