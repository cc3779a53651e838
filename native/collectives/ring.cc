#include "collectives/ring.h"

namespace hs {

std::vector<Lane> make_lanes(const std::vector<Segment>& owned, int n, bool bidirectional) {
  if (!bidirectional || n < 3) return {Lane{1, owned}};
  Lane cw{1, owned}, ccw{-1, owned};
  for (size_t s = 0; s < owned.size(); ++s) {
    const size_t low = (owned[s].count + 1) / 2;
    cw.seg[s].count = low;
    ccw.seg[s].offset = owned[s].offset + low;
    ccw.seg[s].count = owned[s].count - low;
  }
  return {cw, ccw};
}

void ring_reduce_scatter(Group& g, const std::vector<Lane>& lanes, const char* in, DataType dtype, ReduceOp op,
                         const SegmentPlace& place, double postscale) {
  const int n = g.size(), r = g.rank();
  const size_t es = dtype_size(dtype);
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  for (int k = 0; k + 1 < n; ++k) {
    sends.clear();
    recvs.clear();
    for (size_t l = 0; l < lanes.size(); ++l) {
      const Lane& lane = lanes[l];
      // At step k this rank forwards the partial of segment r-dir(k+1) (its raw input at k=0)
      // and folds its own input into segment r-dir(k+2), which ends at its owner after n-1 steps.
      const int out_seg = wrap(r - lane.dir * (k + 1), n);
      const int in_seg = wrap(r - lane.dir * (k + 2), n);
      const Segment& so = lane.seg[size_t(out_seg)];
      const Segment& si = lane.seg[size_t(in_seg)];
      if (so.count > 0) {
        const char* src = k == 0 ? in + so.offset * es : place(l, out_seg);
        sends.push_back(SendSpec{wrap(r + lane.dir, n), src, so.count * es});
      }
      if (si.count > 0) {
        RecvSpec rs;
        rs.peer = wrap(r - lane.dir, n);
        rs.dest = place(l, in_seg);
        rs.bytes = si.count * es;
        rs.mode = RecvMode::kReduce;
        rs.local = in + si.offset * es;
        rs.dtype = dtype;
        rs.op = op;
        if (k + 2 == n) rs.postscale = postscale;  // this step finishes the segment
        recvs.push_back(rs);
      }
    }
    if (!sends.empty() || !recvs.empty()) g.exchange(sends, recvs);
  }
}

void ring_allgather(Group& g, const std::vector<Lane>& lanes, char* buf, size_t unit, const char* own,
                    size_t own_offset) {
  const int n = g.size(), r = g.rank();
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  for (int k = 0; k + 1 < n; ++k) {
    sends.clear();
    recvs.clear();
    for (const Lane& lane : lanes) {
      // Step k forwards the segment owned by r-dir*k (own at k=0) and receives r-dir(k+1)'s.
      const Segment& so = lane.seg[size_t(wrap(r - lane.dir * k, n))];
      const Segment& si = lane.seg[size_t(wrap(r - lane.dir * (k + 1), n))];
      if (so.count > 0) {
        const char* from = k == 0 && own ? own + (so.offset * unit - own_offset) : buf + so.offset * unit;
        sends.push_back(SendSpec{wrap(r + lane.dir, n), from, so.count * unit});
      }
      if (si.count > 0) {
        RecvSpec rs;
        rs.peer = wrap(r - lane.dir, n);
        rs.dest = buf + si.offset * unit;
        rs.bytes = si.count * unit;
        recvs.push_back(rs);
      }
    }
    if (!sends.empty() || !recvs.empty()) g.exchange(sends, recvs);
  }
}

}  // namespace hs
