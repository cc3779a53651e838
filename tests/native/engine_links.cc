// The TCP link's contract with the exchange loop (Transport::exchange): messages padded to
// alignment() arrive in spans whose addresses suit their elements, 8-byte types included, whatever
// came before them on the stream and however that was consumed (odd sizes, odd-sized partial
// reads, the staging buffer filling up and compacting). The reductions read those spans in place.
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "engine_ranks.h"
#include "engine_scenarios.h"
#include "transport/cpu_placement.h"
#include "transport/single_copy.h"
#include "transport/socket_util.h"
#include "transport/tcp_link.h"

namespace hs_test {

namespace {

constexpr int kRank = 0;  // (for the failure messages: one process plays both ends)

// Sends all n bytes, then the padding up to the link's alignment, as Transport::exchange does.
void send_message(hs::TcpLink& link, const uint8_t* p, size_t n) {
  const size_t total = (n + link.alignment() - 1) / link.alignment() * link.alignment();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (size_t off = 0; off < total && std::chrono::steady_clock::now() < deadline;) {
    const size_t k = off < n ? link.try_send(p + off, n - off) : link.try_send(nullptr, total - off);
    off += k;
    if (k == 0) sched_yield();
  }
}

// Takes `bytes` (plus padding) off the link in pieces of at most `piece` bytes, whole `unit`s at a
// time; calls look(span, length) on each piece before consuming it. False on a timeout.
template <class F>
bool take_message(hs::TcpLink& link, size_t bytes, size_t unit, size_t piece, F&& look) {
  const size_t total = (bytes + link.alignment() - 1) / link.alignment() * link.alignment();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t off = 0;
  while (off < total) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    auto span = link.peek();
    size_t k = std::min({span.second, total - off, piece});
    if (off < bytes) k = std::min(k, bytes - off) / unit * unit;  // (the padding is taken as it comes)
    if (k == 0) {
      sched_yield();
      continue;
    }
    if (off < bytes) look(span.first, k);
    link.consume(k);
    off += k;
  }
  return true;
}

}  // namespace

void scenario_links() {
  std::fprintf(stderr, "  TCP link: 8-byte elements after odd-sized messages\n");
  int port = 0;
  const int listen_fd = hs::tcp_listen("127.0.0.1", &port);
  const int client = hs::tcp_connect("127.0.0.1", port, 10000);
  const int server = hs::tcp_accept(listen_fd, 10000);
  ::close(listen_fd);
  hs::TcpLink tx(client, 1), rx(server, 0);
  // Byte messages of odd sizes (one larger than the link's 1 MiB staging buffer), each followed
  // by 1000 int64s.
  const size_t odd[] = {1, 7, 13, 4099, (size_t(1) << 20) + 3, 5, 3};
  std::vector<int64_t> wide(1000);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = int64_t(i) * 1000003;
  std::thread sender([&] {
    for (size_t s : odd) {
      std::vector<uint8_t> bytes(s, uint8_t(s));
      send_message(tx, bytes.data(), s);
      send_message(tx, reinterpret_cast<const uint8_t*>(wide.data()), wide.size() * 8);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // several messages per read, then
  for (size_t s : odd) {
    const std::string what = "after " + std::to_string(s) + " odd bytes";
    bool same = true;
    // Bytes are taken in odd pieces, as a copy receive may take them.
    bool ok = take_message(rx, s, 1, 1021, [&](const uint8_t* p, size_t k) {
      for (size_t i = 0; i < k; ++i) same = same && p[i] == uint8_t(s);
    });
    expect(ok && same, kRank, what + ": the byte message did not arrive intact");
    size_t at = 0, misaligned = 0;
    ok = take_message(rx, wide.size() * 8, 8, 4096, [&](const uint8_t* p, size_t k) {
      misaligned += reinterpret_cast<uintptr_t>(p) % alignof(int64_t) != 0;
      for (size_t i = 0; i < k / 8; ++i, ++at) {
        int64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        same = same && v == wide[at];
      }
    });
    expect(ok && same, kRank, what + ": the int64 message did not arrive intact");
    expect(misaligned == 0, kRank, what + ": " + std::to_string(misaligned) + " int64 spans were not 8-byte aligned");
  }
  sender.join();

  // The single-copy probe and reads (one process plays both ends: its own pid).
  std::fprintf(stderr, "  single-copy reads: the probe and ranges split differently on each side\n");
  const pid_t me = ::getpid();
  uint64_t word = 0x5eedf00dcafe1234ull;
  const uint64_t at = reinterpret_cast<uintptr_t>(&word);
  expect(hs::can_read_peer_memory(me, at, word), kRank, "the probe of this process's own word failed");
  expect(!hs::can_read_peer_memory(me, at, word + 1), kRank, "the probe accepted a wrong value");
  expect(!hs::can_read_peer_memory(me, 0, word), kRank, "the probe accepted a null address");
  expect(!hs::can_read_peer_memory(me, 8, word), kRank, "the probe accepted an unmapped address");
  expect(!hs::can_read_peer_memory(0, at, word), kRank, "the probe accepted pid 0");
  expect(!hs::can_read_peer_memory(0x3fffffff, at, word), kRank, "the probe accepted a pid that does not exist");
  // 3 source ranges into 4 destination ranges whose boundaries differ.
  std::vector<uint8_t> src(10000), dst(10000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + 1);
  iovec there[3] = {{src.data(), 3000}, {src.data() + 3000, 1}, {src.data() + 3001, 6999}};
  iovec here[4] = {{dst.data(), 17}, {dst.data() + 17, 4000}, {dst.data() + 4017, 5000}, {dst.data() + 9017, 983}};
  expect(hs::read_peer_memory(me, here, 4, there, 3) == 0 && dst == src, kRank,
         "a read of 3 ranges into 4 did not copy every byte in order");
  expect(hs::read_peer_memory(me, dst.data(), 8, 16) != 0, kRank, "a read of an unmapped range did not fail");

  // Whether a host's ranks each have a CPU of their own, from their affinity masks.
  std::fprintf(stderr, "  CPU placement: the ranks' masks decide whether they share CPUs\n");
  auto masks = [](std::vector<std::vector<int>> sets) {
    std::vector<hs::CpuMask> out;
    for (auto& set : sets) {
      hs::CpuMask m;
      for (int cpu : set) m.add(cpu);
      m.known = true;
      out.push_back(m);
    }
    return out;
  };
  expect(hs::each_has_own_cpu(masks({{0}, {1}})), kRank, "ranks bound to one core each were taken as sharing");
  expect(hs::each_has_own_cpu(masks({{0, 1}, {0, 1}})), kRank, "2 ranks free on 2 CPUs were taken as sharing");
  expect(!hs::each_has_own_cpu(masks({{0}, {0}})), kRank, "2 ranks bound to one CPU were not taken as sharing");
  expect(!hs::each_has_own_cpu(masks({{0, 1}, {0, 1}, {0, 1}})), kRank, "3 ranks on 2 CPUs were not sharing");
  // Rank 0 may use CPUs 0 and 2, rank 1 only 0: taking the first free CPU in rank order fails.
  expect(hs::each_has_own_cpu(masks({{0, 2}, {0}, {1}})), kRank, "a placement found by re-assignment was missed");
  expect(hs::each_has_own_cpu(masks({{0, 1}, {1}, {2}, {1, 1000}})), kRank, "a rank's CPU 1000 was missed");
  expect(!hs::each_has_own_cpu(masks({{0, 1}, {0, 1}, {0, 1}, {5}})), kRank, "4 ranks on 3 CPUs were not sharing");
  std::vector<hs::CpuMask> unknown = masks({{0}, {1}});
  unknown[1].known = false;
  expect(!hs::each_has_own_cpu(unknown), kRank, "a rank whose mask is unknown was not taken as sharing");
  expect(hs::cpus_in_union(masks({{0, 1}, {1, 2}, {1000}})) == 4, kRank, "the union of the masks is miscounted");
  const hs::CpuMask mine = hs::own_cpu_mask();
  expect(mine.known && mine.count() == hs::usable_cpus(), kRank, "this process's mask was not read");

  scenario_shared_copy();
  scenario_wakeups();
}

}  // namespace hs_test
