// Shared single-copy transfers (transport/single_copy.h) at the level of one ring pair, driven step
// by step from one thread so that every interleaving below is the one under test: the receiver's
// offer, claims from both ends that meet in the middle, the sender's refusal of an offer for
// another message, and the count of bytes the sender wrote. One process plays both ranks (its own
// pid on both doorbells), as in engine_links.cc.
#include <unistd.h>

#include <string>
#include <vector>

#include "engine_ranks.h"
#include "engine_scenarios.h"
#include "shm_pair.h"
#include "transport/shm_segment.h"
#include "transport/single_copy.h"

namespace hs_test {

namespace {
constexpr int kRank = 0;
}  // namespace

void scenario_shared_copy() {
  std::fprintf(stderr, "  shared copies: offer, claims from both ends, the sender's writes\n");
  auto seg = one_process_segment("shared_copy", 64 << 10, 4 << 10);
  // Both directions single-copy (each end's probe of the other succeeded).
  seg->ring(false, 0, 1)->single_copy_from.store(1 << 20);
  seg->ring(false, 1, 0)->single_copy_from.store(1 << 20);
  hs::ShmLink sender(seg.get(), false, 0, 1), receiver(seg.get(), false, 1, 0);
  expect(sender.may_write_peer() && receiver.peer_may_write_here(), kRank, "the probes' results were not seen");

  const pid_t me = ::getpid();
  for (size_t bytes : {(size_t(3) << 20) + 5, size_t(1) << 20}) {
    const std::string what = std::to_string(bytes) + " bytes: ";
    std::vector<uint8_t> src(bytes), dst(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) src[i] = uint8_t(i * 13 + bytes);
    const size_t chunk = hs::shared_copy_chunk(bytes);
    const size_t chunks = (bytes + chunk - 1) / chunk;
    const uint64_t end = sender.note_single_copy_send(bytes);
    const uint64_t pushed_before = receiver.pushed_by_peer();
    uint64_t dest;
    size_t off, k;
    expect(!sender.claim_back_chunk(end, bytes, &dest, &off, &k), kRank, what + "a claim succeeded before any offer");
    receiver.offer_copy_share(reinterpret_cast<uintptr_t>(dst.data()), bytes, chunk);
    expect(!sender.claim_back_chunk(end + 1, bytes + 1, &dest, &off, &k), kRank,
           what + "the sender claimed a chunk of an offer for another message");
    // Two front claims for each back claim: they must meet without a gap or an overlap.
    size_t front = 0, back = 0, written = 0, next_front = 0, next_back = bytes;
    for (bool more = true; more;) {
      more = false;
      size_t index;
      for (int i = 0; i < 2 && receiver.claim_front_chunk(&index); ++i, ++front) {
        off = index * chunk;
        k = std::min(chunk, bytes - off);
        expect(off == next_front, kRank, what + "a front claim is not the next chunk");
        expect(hs::read_peer_memory(me, dst.data() + off, reinterpret_cast<uintptr_t>(src.data()) + off, k) == 0, kRank,
               what + "a read failed");
        next_front = off + k;
        more = true;
      }
      if (sender.claim_back_chunk(end, bytes, &dest, &off, &k)) {
        expect(dest == reinterpret_cast<uintptr_t>(dst.data()), kRank, what + "the offer's destination was lost");
        expect(off + k == next_back && k > 0, kRank, what + "a back claim is not the last unclaimed chunk");
        expect(hs::write_peer_memory(me, src.data() + off, dest + off, k) == 0, kRank, what + "a write failed");
        sender.note_pushed(k);
        written += k;
        next_back = off;
        ++back;
        more = true;
      }
    }
    expect(front + back == chunks && next_front == next_back, kRank,
           what + std::to_string(front) + " + " + std::to_string(back) + " claims for " + std::to_string(chunks) +
               " chunks");
    expect(back > 0 && receiver.pushed_by_peer() - pushed_before == written, kRank,
           what + "the sender's writes were not counted");
    expect(dst == src, kRank, what + "the message did not arrive intact");
    receiver.mark_copied(bytes);
    expect(sender.copied_by_peer() == end, kRank, what + "the message was not marked read");
  }
  // An abandoned receive withdraws its offer: the sender may claim nothing more of it.
  std::vector<uint8_t> dst(size_t(2) << 20);
  const uint64_t end = sender.note_single_copy_send(dst.size());
  receiver.offer_copy_share(reinterpret_cast<uintptr_t>(dst.data()), dst.size(), hs::shared_copy_chunk(dst.size()));
  size_t off, k;
  uint64_t dest;
  size_t index;
  expect(receiver.claim_front_chunk(&index) && index == 0, kRank, "the receiver could not claim a fresh offer's chunk");
  receiver.withdraw_copy_share();
  expect(!sender.claim_back_chunk(end, dst.size(), &dest, &off, &k) && !receiver.claim_front_chunk(&index), kRank,
         "a chunk of a withdrawn offer was claimed");
  const uint64_t word = 1;
  expect(hs::write_peer_memory(me, &word, 16, sizeof(word)) != 0, kRank, "a write to an unmapped range did not fail");
}

}  // namespace hs_test
