// Algorithm switch points, in one place because allreduce and reducescatter must choose the same
// algorithm for the same total size: that is what makes a reducescatter block bit-identical to
// the matching slice of an allreduce (see reducescatter.cc). How a message moves between two ranks
// is the transport's choice, with its reasons there: single-copy from
// TransportOptions::shm_single_copy_bytes, copies shared by both ends in chunks of
// shared_copy_chunk() (transport/single_copy.h).
#pragma once
#include <cstddef>

namespace hs {
namespace tuning {

// Allreduce/reducescatter at or below this many bytes (whole tensor): one exchange of whole
// buffers and a local rank-order reduction. Above: ring reduce-scatter (+ ring allgather). The
// direct path costs one round but (n-1)x the traffic; the ring costs 2(n-1) rounds. With round
// latencies of 5-20 us and 2-10 GB/s links the crossover sits near 64-160 KiB for 3-8 ranks; the
// lower end is chosen because the direct path also reduces without overlapping the transfer.
constexpr size_t kDirectReduceBytes = 64 * 1024;

// Rings carry half of each segment clockwise and half counter-clockwise from this many bytes on
// (and 3+ ranks), so both directions of every full-duplex link are busy. Below it, halving the
// messages only adds per-message overhead.
constexpr size_t kBidirectionalRingBytes = 1024 * 1024;

// Allgatherv at or below this many bytes (all ranks together) sends directly to every peer.
constexpr size_t kDirectAllgatherBytes = 64 * 1024;

// Broadcast at or below this many bytes, or with 2 ranks, is sent by the root to every peer;
// above, it is pipelined down a chain root -> root+1 -> ... in chunks.
constexpr size_t kDirectBroadcastBytes = 64 * 1024;
// Chain chunk = sqrt(bytes * kLatencyBandwidthBytes / (ranks - 2)), clamped: minimises
// (chunks + ranks - 2) rounds of (latency + chunk / bandwidth) when latency * bandwidth is this.
constexpr size_t kLatencyBandwidthBytes = 64 * 1024;
constexpr size_t kMinBroadcastChunk = 64 * 1024;
constexpr size_t kMaxBroadcastChunk = 4 * 1024 * 1024;

}  // namespace tuning
}  // namespace hs
