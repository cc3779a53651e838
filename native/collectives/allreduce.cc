// Allreduce. Thresholds live in tuning.h (kDirectReduceBytes, kBidirectionalRingBytes) because
// reducescatter must switch at exactly the same sizes.
//
// Small: every rank sends its whole buffer to every peer in one exchange and reduces the n
// buffers locally in rank order: one round of latency, identical bits everywhere because every
// rank folds the same inputs in the same order. Two ranks reduce the peer's buffer as it arrives
// (no staging copy), naming rank 0's operand first on both.
// Large: ring reduce-scatter (reductions stream out of the transport with RecvMode::kReduce,
// reading unreduced data straight from `in`, so out-of-place needs no copy of the input) then a
// ring allgather that copies each owner's reduced segment verbatim to everyone.
#include <cstring>
#include <vector>

#include "collectives/checks.h"
#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "collectives/rank_order.h"
#include "collectives/ring.h"
#include "collectives/scratch.h"
#include "collectives/tuning.h"
#include "common/errors.h"
#include "common/reduce.h"

namespace hs {
namespace {

void allreduce_direct(Group& g, const void* in, void* out, size_t count, DataType dtype, ReduceOp op, double postscale,
                      bool input_sent = false) {
  const int n = g.size(), r = g.rank();
  const size_t bytes = count * dtype_size(dtype), slot = align_up(bytes);
  if (n == 2 && (input_sent || in != out)) {
    // Reduce straight out of the transport into `out`, lower rank's operand first on both sides
    // (so both get the same bits). Not in place with the input still to send: the reduction
    // would overwrite input not yet sent.
    const int peer = 1 - r;
    RecvSpec rs;
    rs.peer = peer;
    rs.dest = out;
    rs.bytes = bytes;
    rs.mode = RecvMode::kReduce;
    rs.local = in;
    rs.dtype = dtype;
    rs.op = op;
    rs.incoming_first = peer < r;
    rs.postscale = postscale;
    // Reused (exchanges never nest): two allocations would cost a 4 KiB call more than its reduction.
    static thread_local std::vector<SendSpec> sends;
    static thread_local std::vector<RecvSpec> recvs;
    sends.clear();
    if (!input_sent) sends.push_back(SendSpec{peer, in, bytes});
    recvs.assign(1, rs);
    g.exchange(sends, recvs);
    return;
  }
  ScratchLease scratch(slot * size_t(n));
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  std::vector<const void*> srcs(size_t(n), in);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    char* dest = scratch.data() + slot * size_t(p);
    if (!input_sent) sends.push_back(SendSpec{p, in, bytes});
    RecvSpec rs;
    rs.peer = p;
    rs.dest = dest;
    rs.bytes = bytes;
    recvs.push_back(rs);
    srcs[size_t(p)] = dest;
  }
  g.exchange(sends, recvs);
  reduce_in_rank_order(out, srcs, count, dtype, op);
  scale_buffer(out, count, dtype, postscale);
}

void allreduce_ring(Group& g, const void* in, void* out, size_t count, DataType dtype, ReduceOp op, double postscale) {
  const size_t es = dtype_size(dtype);
  const auto lanes =
      make_lanes(even_partition(count, g.size()), g.size(), count * es >= tuning::kBidirectionalRingBytes);
  char* base = static_cast<char*>(out);
  ring_reduce_scatter(
      g, lanes, static_cast<const char*>(in), dtype, op,
      [&](size_t l, int owner) { return base + lanes[l].seg[size_t(owner)].offset * es; }, postscale);
  ring_allgather(g, lanes, base, es);
}

}  // namespace

void allreduce_send_input(Group& g, const void* in, size_t bytes) {
  check_buffer(in, bytes, "allreduce", "input");
  if (bytes > tuning::kDirectReduceBytes)
    throw CollectiveError("internal: only a direct-path allreduce can send its input early");
  static thread_local std::vector<SendSpec> sends;  // reused, as in allreduce_direct
  static const std::vector<RecvSpec> no_recvs;
  sends.clear();
  for (int p = 0; p < g.size(); ++p)
    if (p != g.rank()) sends.push_back(SendSpec{p, in, bytes});
  g.exchange(sends, no_recvs);
}

void allreduce_after_send(Group& g, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                          double postscale) {
  const size_t bytes = count * dtype_size(dtype);
  if (bytes > tuning::kDirectReduceBytes || g.size() == 1 || count == 0)
    throw CollectiveError("internal: allreduce_after_send needs a direct-path allreduce");
  allreduce_direct(g, in, out, count, dtype, op, postscale, true);
}

void discard_sent_input(Group& g, int peer, size_t bytes) {
  if (bytes == 0) return;
  ScratchLease sink(bytes);
  RecvSpec rs;
  rs.peer = peer;
  rs.dest = sink.data();
  rs.bytes = bytes;
  g.exchange({}, {rs});
}

void allreduce(Group& g, const void* in, void* out, size_t count, DataType dtype, ReduceOp op, double postscale) {
  check_group(g, "allreduce");
  check_dtype(dtype, "allreduce");
  check_reduce_op(op, "allreduce");
  const size_t bytes = count * dtype_size(dtype);
  check_buffer(in, bytes, "allreduce", "input");
  check_buffer(out, bytes, "allreduce", "output");
  if (count == 0) return;
  if (g.size() == 1) {
    if (in != out) std::memcpy(out, in, bytes);
    scale_buffer(out, count, dtype, postscale);
    return;
  }
  if (bytes <= tuning::kDirectReduceBytes) {
    allreduce_direct(g, in, out, count, dtype, op, postscale);
  } else {
    allreduce_ring(g, in, out, count, dtype, op, postscale);
  }
}

}  // namespace hs
