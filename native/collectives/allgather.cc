// Allgatherv. Small totals: every rank sends its block straight to every peer (one round).
// Large: ring allgather (each link carries every block once), with each block split over two
// counter-rotating rings when large enough to keep both link directions busy.
#include <cstring>
#include <vector>

#include "collectives/checks.h"
#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "collectives/ring.h"
#include "collectives/tuning.h"

namespace hs {
namespace {

void allgather_direct(Group& g, char* out, const std::vector<Segment>& block, bool mine_sent) {
  const int n = g.size(), r = g.rank();
  const Segment& mine = block[size_t(r)];
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    if (mine.count > 0 && !mine_sent) sends.push_back(SendSpec{p, out + mine.offset, mine.count});
    const Segment& theirs = block[size_t(p)];
    if (theirs.count > 0) {
      RecvSpec rs;
      rs.peer = p;
      rs.dest = out + theirs.offset;
      rs.bytes = theirs.count;
      recvs.push_back(rs);
    }
  }
  if (!sends.empty() || !recvs.empty()) g.exchange(sends, recvs);
}

}  // namespace

void send_input_early(Group& g, const void* in, size_t bytes) {
  if (bytes == 0) return;
  std::vector<SendSpec> sends;
  for (int p = 0; p < g.size(); ++p)
    if (p != g.rank()) sends.push_back(SendSpec{p, in, bytes});
  g.exchange(sends, {});
}

void allgatherv(Group& g, const void* in, void* out, const std::vector<size_t>& bytes_per_rank, SentEarly early) {
  check_group(g, "allgatherv");
  check_per_rank(bytes_per_rank, g.size(), "allgatherv", "bytes_per_rank");
  const std::vector<Segment> block = prefix_partition(bytes_per_rank);
  const size_t total = block.back().end();
  const Segment& mine = block[size_t(g.rank())];
  check_buffer(in, mine.count, "allgatherv", "input");
  check_buffer(out, total, "allgatherv", "output");
  char* dst = static_cast<char*>(out);
  // Our own block goes in place first; both algorithms send it from there. memmove: `in` may
  // already be (or overlap) that slot of `out`.
  if (mine.count > 0 && dst + mine.offset != in) std::memmove(dst + mine.offset, in, mine.count);
  if (g.size() == 1 || total == 0) return;
  if (total <= tuning::kDirectAllgatherBytes || early != SentEarly::kNone) {
    allgather_direct(g, dst, block, early == SentEarly::kByThisRank);
  } else {
    const bool both_ways = total >= tuning::kBidirectionalRingBytes;
    // Our block goes out from `in` unless `in` lies inside `out` (then the memmove above may
    // have overwritten part of it).
    const char* src = static_cast<const char*>(in);
    const bool apart = src + mine.count <= dst || src >= dst + total;
    ring_allgather(g, make_lanes(block, g.size(), both_ways), dst, 1, apart ? src : nullptr, mine.offset);
  }
}

}  // namespace hs
