// Ring phases shared by allreduce, reducescatter and allgatherv.
//
// A lane is one ring direction plus the piece of the buffer that each rank ends up owning. One
// lane is the classic ring; two lanes (dir +1 and -1, each carrying half of every rank's piece)
// keep both directions of every link busy. Every step of every lane runs in a single exchange.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>
#include "collectives/partition.h"
#include "common/dtype.h"
#include "transport/group.h"

namespace hs {

struct Lane {
  int dir = 1;               // +1: send to rank+1, receive from rank-1; -1: the reverse
  std::vector<Segment> seg;  // seg[s]: the piece rank s owns at the end (offsets in units)
};

// Splits each owner's piece in two halves (lower half clockwise) when `bidirectional` and the
// group has 3+ ranks (with 2 ranks both neighbours are the same peer, and one lane already uses
// both directions). Otherwise one clockwise lane over the pieces as given.
std::vector<Lane> make_lanes(const std::vector<Segment>& owned, int n, bool bidirectional);

// Where this rank keeps the running reduction of lane `lane`'s segment owned by `owner`
// (owner == my rank: where the final result goes).
using SegmentPlace = std::function<char*(size_t lane, int owner)>;

// Reduce-scatter: afterwards place(l, my rank) holds, for every lane l, the reduction over all
// ranks of `in`'s segment. Each step reduces straight out of the transport (RecvMode::kReduce)
// with the not-yet-reduced local data read from `in`, so no copy of `in` is ever made.
// Segment s accumulates in ring order s+dir, s+2dir, ..., s: fixed for a given layout, so the
// result does not depend on timing. Units are elements of `dtype`. The last step scales each
// finished piece by `postscale` (scale_buffer) as it is reduced.
void ring_reduce_scatter(Group& g, const std::vector<Lane>& lanes, const char* in, DataType dtype, ReduceOp op,
                         const SegmentPlace& place, double postscale = 1.0);

// Allgather: buf (units of `unit` bytes) holds this rank's segments of every lane; afterwards
// it holds all of them, each a verbatim copy of its owner's bytes. With `own` set, this rank's
// segments are sent from there instead (own[x] is the byte at buf[own_offset + x]): a peer that
// reads them straight out of this process (transport/single_copy.h) then reads the caller's
// input rather than lines this core has just written into buf, which it would have to fetch
// from this core's cache. A 2-rank allgather of 64 MiB, Intel Xeon, 2 cores: 20.0-20.9 ms against
// 21.0-21.3 ms sending from buf (quiet runs of three interleaved batches); 4 MiB within noise.
void ring_allgather(Group& g, const std::vector<Lane>& lanes, char* buf, size_t unit, const char* own = nullptr,
                    size_t own_offset = 0);

}  // namespace hs
