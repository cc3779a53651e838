// Transport's receiving side of single-copy messages (single_copy.h): the stream carries the
// sender's address ranges, and the receiver reads what they name straight out of its memory.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/errors.h"
#include "transport/single_copy.h"
#include "transport/transport.h"

namespace hs {

namespace {
// A single-copy reduction reads the sender's data in pieces of this size into a buffer that stays
// in cache for the reduction that follows.
constexpr size_t kSingleCopyReduceChunk = 512 << 10;
}  // namespace

bool Transport::receive_single_copy(PeerLink* link, ShmLink* shm, const RecvSpec& spec, size_t esize,
                                    SingleCopyProgress& at, bool may_claim) {
  static thread_local std::vector<iovec> here, there;
  static thread_local std::vector<uint64_t> staging;  // uint64_t: aligned for every dtype
  const bool reduce = spec.mode == RecvMode::kReduce;
  const size_t align = link->alignment();
  bool moved = false;
  for (;;) {
    auto got = link->peek();
    if (at.read == spec.bytes) {  // every span read: consume the stream's padding
      size_t pad = (align - at.stream % align) % align;
      if (pad == 0 || got.second == 0) break;
      size_t k = std::min(got.second, pad);
      link->consume(k);
      at.stream += k;
      moved = true;
      continue;
    }
    if (at.shared) {
      if (!advance_shared_copy(shm, spec, at, may_claim)) break;
      moved = true;
      // One chunk per call, so that the exchange serves its other transfers between chunks.
      if (at.read < spec.bytes) return true;
      link->consume(sizeof(RemoteSpan));
      at.stream += sizeof(RemoteSpan);
      continue;
    }
    // The spans that have arrived (the ring's end never splits one), read in one batch: up to the
    // staging buffer's size when reducing, bounded by the ranges one read takes on either side.
    const size_t arrived = std::min(got.second / sizeof(RemoteSpan), kMaxReadRanges);
    if (arrived == 0) break;
    auto span = [&](size_t i) {
      RemoteSpan sp;
      std::memcpy(&sp, got.first + i * sizeof(RemoteSpan), sizeof(sp));
      return sp;
    };
    // A whole message in one range, to one range, that the sender may help copy: offer it.
    if (!reduce && at.read == 0 && at.skip == 0 && spec.bytes >= 2 * kMinSharedCopyChunk &&
        span(0).bytes == spec.bytes && shm->peer_may_write_here() &&
        (!scattered_ || !scattered_->contains(spec.dest))) {
      const size_t chunk = shared_copy_chunk(spec.bytes);
      if ((spec.bytes + chunk - 1) / chunk <= kMaxSharedCopyChunks) {
        at.shared = true;
        at.source = span(0).addr;
        at.chunk = chunk;
        at.own = 0;
        at.pushed_from = shm->pushed_by_peer();
        shm->offer_copy_share(reinterpret_cast<uintptr_t>(spec.dest), spec.bytes, chunk);
        moved = true;
        continue;
      }
    }
    size_t want = 0;
    const size_t limit = reduce ? std::min(kSingleCopyReduceChunk, spec.bytes - at.read) : spec.bytes - at.read;
    for (size_t i = 0, skip = at.skip; i < arrived && want < limit; ++i, skip = 0) {
      const RemoteSpan sp = span(i);
      if (sp.bytes <= skip || sp.bytes % esize != 0 || sp.bytes - skip > spec.bytes - at.read - want)
        throw TransportError(describe(spec.peer) + " sent a malformed single-copy message (a span of " +
                             std::to_string(sp.bytes) + " bytes at byte " + std::to_string(at.read + want) + " of " +
                             std::to_string(spec.bytes) + ")");
      want += std::min(sp.bytes - skip, limit - want);
    }
    // Where the bytes go here: the staging buffer, or the destination's pieces (which may cut the
    // batch shorter).
    here.clear();
    if (reduce) {
      staging.resize(kSingleCopyReduceChunk / sizeof(uint64_t));
      here.push_back({staging.data(), want});
    } else {
      size_t covered = 0;
      while (covered < want && here.size() < kMaxReadRanges) {
        uint8_t* dst = static_cast<uint8_t*>(spec.dest) + at.read + covered;
        size_t k = want - covered;
        if (scattered_) scattered_->map(dst, k);
        here.push_back({dst, k});
        covered += k;
      }
      want = covered;
    }
    there.clear();
    size_t whole = 0, skip = at.skip;
    for (size_t i = 0, taken = 0; taken < want; ++i) {
      const RemoteSpan sp = span(i);
      const size_t k = std::min(sp.bytes - skip, want - taken);
      there.push_back({reinterpret_cast<void*>(static_cast<uintptr_t>(sp.addr + skip)), k});
      taken += k;
      if (k == sp.bytes - skip) {
        ++whole;
        skip = 0;
      } else {
        skip += k;
      }
    }
    if (int err = read_peer_memory(shm->peer_pid(), here.data(), here.size(), there.data(), there.size()))
      throw TransportError(explain("cannot read the data " + describe(spec.peer) + " sent: " + peer_memory_error(err)));
    if (reduce) {
      const uint8_t* incoming = reinterpret_cast<const uint8_t*>(staging.data());
      for (size_t done = 0; done < want;) {
        size_t k = want - done;
        uint8_t* dst;
        const uint8_t* local;
        locate_received(spec, at.read + done, k, &dst, &local);
        fold_received(spec, dst, local, incoming + done, k / esize);
        done += k;
      }
    }
    link->consume(whole * sizeof(RemoteSpan));
    at.stream += whole * sizeof(RemoteSpan);
    at.skip = skip;
    at.read += want;
    moved = true;
  }
  return moved;
}

bool Transport::advance_shared_copy(ShmLink* shm, const RecvSpec& spec, SingleCopyProgress& at, bool may_claim) {
  size_t index;
  if (may_claim && shm->claim_front_chunk(&index)) {
    // The chunk's place from this end's own record of the offer: the shared header only says which.
    const size_t offset = index * at.chunk;
    if (offset >= spec.bytes)
      throw TransportError(describe(spec.peer) + " corrupted a shared copy's claims (chunk " + std::to_string(index) +
                           " of a message of " + std::to_string(spec.bytes) + " bytes)");
    const size_t k = std::min(at.chunk, spec.bytes - offset);
    if (int err = read_peer_memory(shm->peer_pid(), static_cast<uint8_t*>(spec.dest) + offset, at.source + offset, k))
      throw TransportError(explain("cannot read the data " + describe(spec.peer) + " sent: " + peer_memory_error(err)));
    at.own += k;
    return true;
  }
  // Done once every chunk is claimed and the sender's have landed (the sum says both).
  if (shm->pushed_by_peer() - at.pushed_from < spec.bytes - at.own) return false;
  at.shared = false;
  at.read = spec.bytes;
  return true;
}

bool Transport::push_shared_copy(ShmLink* shm, int peer, uint64_t message_end, const uint8_t* source, size_t bytes) {
  uint64_t dest;
  size_t offset, k;
  if (!shm->claim_back_chunk(message_end, bytes, &dest, &offset, &k)) return false;
  if (int err = write_peer_memory(shm->peer_pid(), source + offset, dest + offset, k))
    throw TransportError(
        explain("cannot write the data for " + describe(peer) + ": " + peer_memory_error(err, "process_vm_writev")));
  shm->note_pushed(k);
  shared_copy_bytes_.fetch_add(static_cast<int64_t>(k), std::memory_order_relaxed);
  return true;
}

}  // namespace hs
