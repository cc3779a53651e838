// Collective algorithms over a Group. All ranks of the group call the same function with
// consistent arguments (the engine's negotiation guarantees that). Results are bit-identical on
// every rank (reductions happen in one fixed order), so replicated parameters never drift.
#pragma once
#include <cstddef>
#include <vector>
#include "common/dtype.h"
#include "transport/group.h"

namespace hs {

// out = reduce over ranks of in (count elements). in may equal out. op: Sum, Min, Max, Product
// (the caller turns Average into Sum with a postscale of 1/n). Small messages: one exchange of whole buffers and
// a local reduction in rank order (latency-optimal); large: ring reduce-scatter + allgather
// (bandwidth-optimal). count may be 0. The result is then scaled by postscale (scale_buffer) as
// each piece is finished, not in a second pass over it (Average = Sum with postscale 1/n).
void allreduce(Group& g, const void* in, void* out, size_t count, DataType dtype, ReduceOp op, double postscale = 1.0);

// The halves of a small allreduce whose input goes out ahead of negotiation (the engine's
// speculative path): allreduce_send_input sends this rank's whole input to every peer, exactly
// as allreduce() would for count*size <= tuning::kDirectReduceBytes; allreduce_after_send is
// allreduce() for a rank that did so (it only receives and reduces; the other ranks call plain
// allreduce() or allreduce_after_send, in any mix); discard_sent_input receives and drops what a
// peer sent that way for a collective that then failed.
void allreduce_send_input(Group& g, const void* in, size_t bytes);
void allreduce_after_send(Group& g, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                          double postscale = 1.0);
void discard_sent_input(Group& g, int peer, size_t bytes);

// What of a broadcast or an allgather went out ahead of negotiation (the engine's speculative
// path): whole inputs, sent to every peer by send_input_early exactly as the direct algorithm
// sends them. kNone: nothing. Otherwise the direct algorithm runs whatever the size, its first
// messages already on their way: kByOthers where this rank sent nothing early, kByThisRank where
// it did (it skips those sends). Broadcast counts only the root's input.
enum class SentEarly { kNone, kByOthers, kByThisRank };
void send_input_early(Group& g, const void* in, size_t bytes);

// out = concatenation, in rank order, of every rank's in; bytes_per_rank[r] is rank r's size
// (may differ, may be 0). in is bytes_per_rank[g.rank()] long.
void allgatherv(Group& g, const void* in, void* out, const std::vector<size_t>& bytes_per_rank,
                SentEarly early = SentEarly::kNone);

// buf (bytes long) on root is copied to buf on every rank.
void broadcast(Group& g, void* buf, size_t bytes, int root, SentEarly early = SentEarly::kNone);

// Rank r sends send_bytes[p] bytes (consecutive in `in`, in peer order) to peer p and receives
// recv_bytes[p] bytes from p into `out` (consecutive, in peer order).
void alltoallv(Group& g, const void* in, const std::vector<size_t>& send_bytes, void* out,
               const std::vector<size_t>& recv_bytes);

// in holds sum(counts) elements on every rank; out receives this rank's block (counts[g.rank()]
// elements, blocks laid out in rank order) of the element-wise reduction over ranks.
void reducescatter(Group& g, const void* in, void* out, const std::vector<size_t>& counts, DataType dtype, ReduceOp op);

// buf (sum(counts) elements on every rank; counts[t] is tensor t's) becomes the Adasum of every
// rank's buf, tensor by tensor (adasum.cc says how ranks combine). dtype: a floating-point type.
void adasum_allreduce(Group& g, void* buf, const std::vector<size_t>& counts, DataType dtype);

// Returns once every rank of the group has entered.
void barrier(Group& g);

}  // namespace hs
