// Wake-ups over one ring pair (transport/shm_segment.h), whose writers skip their fence where the
// sleeping side issues a process-wide barrier (transport/asymmetric_fence.h). Two threads play the
// two ends: a reader that sleeps on its doorbell whenever its ring is empty while a writer sends in
// bursts with pauses, then a writer that sleeps for space in a full ring while a reader drains it in
// bursts. A lost wake-up would leave the sleeper asleep until its timeout (a second): every wait
// must end long before that. One process plays both ranks, as in engine_shared_copy.cc.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "engine_ranks.h"
#include "engine_scenarios.h"
#include "shm_pair.h"
#include "transport/shm_segment.h"

namespace hs_test {

namespace {
constexpr int kRank = 0;
constexpr int kMessages = 4000;
constexpr int kSleepUs = 1000000;
constexpr double kLongestWaitS = 0.5;  // far below the timeout, far above a scheduling delay

struct Watch {
  hs::ShmLink* link;
  uint64_t mark;
};
bool link_moved(void* ctx) {
  auto* w = static_cast<Watch*>(ctx);
  return w->link->news_mark() != w->mark;
}

// Sleeps on `bell` until `link` moves (or the timeout); returns the seconds slept.
double sleep_until_moved(hs::Doorbell* bell, hs::ShmLink& link, uint64_t mark) {
  Watch w{&link, mark};
  const auto start = std::chrono::steady_clock::now();
  const uint32_t seen = bell->seq.load();
  if (!link_moved(&w)) hs::doorbell_wait(bell, seen, kSleepUs, link_moved, &w);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void pause_a_little(std::mt19937& rng) { std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100)); }
}  // namespace

void scenario_wakeups() {
  std::fprintf(stderr, "  wake-ups: a sleeping reader and a writer sleeping for space are always woken\n");
  auto seg = one_process_segment("wakeups", 64 << 10, 4 << 10);
  for (bool control : {false, true}) {
    // Data rings (64 KiB): the reader runs dry and sleeps. Control rings (4 KiB): the writer fills
    // the ring and sleeps for space.
    hs::ShmLink writer(seg.get(), control, 0, 1), reader(seg.get(), control, 1, 0);
    const std::string what = control ? "writer waiting for space: " : "reader waiting for data: ";
    double longest_read_wait = 0, longest_write_wait = 0;
    std::thread writing([&] {
      std::mt19937 rng(7);
      for (uint64_t i = 0; i < kMessages;) {
        if (writer.try_send(reinterpret_cast<const uint8_t*>(&i), sizeof i) == sizeof i) {
          writer.notify_peer();
          ++i;
          if (!control && rng() % 8 == 0) pause_a_little(rng);
          continue;
        }
        const uint64_t mark = writer.news_mark();
        writer.wait_for_space(true);
        if (writer.try_send(reinterpret_cast<const uint8_t*>(&i), sizeof i) == sizeof i) {
          writer.wait_for_space(false);
          writer.notify_peer();
          ++i;
          continue;
        }
        longest_write_wait = std::max(longest_write_wait, sleep_until_moved(seg->doorbell(0), writer, mark));
        writer.wait_for_space(false);
      }
    });
    std::mt19937 rng(11);
    uint64_t expected = 0;
    while (expected < kMessages) {
      auto [p, n] = reader.peek();
      if (n >= sizeof(uint64_t)) {
        uint64_t v;
        std::memcpy(&v, p, sizeof v);
        if (!expect(v == expected, kRank,
                    what + "message " + std::to_string(expected) + " arrived as " + std::to_string(v)))
          break;
        reader.consume(sizeof v);
        reader.notify_space_freed();
        ++expected;
        if (control && rng() % 64 == 0) pause_a_little(rng);
        continue;
      }
      longest_read_wait = std::max(longest_read_wait, sleep_until_moved(seg->doorbell(1), reader, reader.news_mark()));
    }
    writing.join();
    expect(longest_read_wait < kLongestWaitS, kRank,
           what + "the reader slept " + std::to_string(longest_read_wait) + " s: a wake-up was lost");
    expect(longest_write_wait < kLongestWaitS, kRank,
           what + "the writer slept " + std::to_string(longest_write_wait) + " s: a wake-up was lost");
  }
}

}  // namespace hs_test
