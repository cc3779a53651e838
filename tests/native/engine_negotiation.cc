// Negotiation through the whole engine: the coordinator's cached lane in steady state and when
// something unusual happens to it, process sets, join, and several threads submitting at once
// while the timeline is switched on and off.
#include <algorithm>
#include <random>

#include "engine/cached_lane.h"
#include "engine_ranks.h"
#include "engine_scenarios.h"

namespace hs_test {

namespace {

using hs::DataType;
using hs::OpType;
using hs::ReduceOp;

hs::TensorRequest sum_of(const std::string& name, std::vector<float>& v, int32_t process_set = 0) {
  return Rank::request(OpType::kAllreduce, name, v.data(), v.data(), DataType::kFloat32, {int64_t(v.size())},
                       process_set);
}

bool all_equal(const std::vector<float>& v, float want) {
  return std::all_of(v.begin(), v.end(), [&](float x) { return x == want; });
}

// Rounds of 12 tensors submitted in a different random order on each rank; in some rounds the
// last rank gives one tensor a different length, which must fail on every rank and leave the
// rest of the round (and later rounds) exact.
void lane_random_rounds(Rank& k) {
  const int n = k.size(), r = k.rank();
  std::mt19937 mine(1234 + r), shared(99);  // shared: the same draws on every rank
  const float want = float(n * (n + 1) / 2);
  const size_t kSizes[] = {3, 5, 4096, 20000};
  int mismatches = 0;
  const auto cached_before = k.engine().stats().requests_cached.load();
  for (int round = 0; round < 25; ++round) {
    std::vector<size_t> sizes;
    for (int i = 0; i < 12; ++i) sizes.push_back(kSizes[shared() % 4]);
    const int odd = round % 5 == 4 ? int(shared() % 12) : -1;
    std::vector<std::vector<float>> t;
    for (int i = 0; i < 12; ++i) t.emplace_back(sizes[size_t(i)] + (i == odd && r == n - 1), float(r + 1));
    std::vector<int> order(12);
    for (int i = 0; i < 12; ++i) order[size_t(i)] = i;
    std::shuffle(order.begin(), order.end(), mine);
    std::vector<int64_t> handles(12);
    for (int i : order) handles[size_t(i)] = k.submit(sum_of("t." + std::to_string(i), t[size_t(i)]));
    for (int i : order) {
      Outcome o = k.wait(handles[size_t(i)]);
      const std::string what = "round " + std::to_string(round) + " tensor " + std::to_string(i);
      if (i == odd) {
        mismatches += k.failed_with(o, {"'t." + std::to_string(i) + "'", "shape"}, what);
      } else if (k.succeeded(o, what)) {
        k.expect(all_equal(t[size_t(i)], want), what + ": wrong values");
      }
    }
  }
  k.expect(mismatches == 5, "expected 5 planned mismatches, saw " + std::to_string(mismatches));
  k.expect(k.engine().stats().requests_cached.load() - cached_before >= 12 * 10, "the lane was hardly used");
}

// Two cached signatures of one tensor: the last rank sends the other one (a mismatch everywhere).
void lane_two_signatures(Rank& k) {
  const int n = k.size(), r = k.rank();
  std::vector<float> small(4), large(8);
  for (int i = 0; i < 3; ++i) {
    k.succeeded(k.run(sum_of("w", small)), "w small");
    k.succeeded(k.run(sum_of("w", large)), "w large");
  }
  k.failed_with(k.run(sum_of("w", r == n - 1 ? large : small)), {"'w'", "[4]", "[8]"}, "w with two signatures");
  std::fill(small.begin(), small.end(), float(r + 1));
  if (k.succeeded(k.run(sum_of("w", small)), "w after the mismatch"))
    k.expect(all_equal(small, float(n * (n + 1) / 2)), "w after the mismatch: wrong values");
}

// A rank that is late on a cached tensor: after a second the lane hands the entry to the general
// path (stall check), which still completes it when the rank arrives.
void lane_late_rank(Rank& k) {
  const int n = k.size(), r = k.rank();
  std::vector<float> x(4);
  for (int i = 0; i < 3; ++i) k.succeeded(k.run(sum_of("late", x)), "late warm-up");
  std::fill(x.begin(), x.end(), float(r + 1));
  if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  if (k.succeeded(k.run(sum_of("late", x)), "late"))
    k.expect(all_equal(x, float(n * (n + 1) / 2)), "late: wrong values");
}

// A rank that joins while the others' cached tensor waits contributes zeros; then everyone joins.
void lane_join(Rank& k) {
  const int n = k.size(), r = k.rank();
  std::vector<float> j(5);
  for (int i = 0; i < 3; ++i) k.succeeded(k.run(sum_of("j", j)), "j warm-up");
  std::fill(j.begin(), j.end(), r == n - 1 ? 100.f : float(r + 1));
  if (r != n - 1 && k.succeeded(k.run(sum_of("j", j)), "j beside a joined rank"))
    k.expect(all_equal(j, float(n * (n - 1) / 2)), "j beside a joined rank: wrong values");
  Outcome o = k.run(Rank::request(OpType::kJoin, "join", nullptr, nullptr, DataType::kUInt8, {}));
  if (k.succeeded(o, "join")) k.expect(o.result.value >= 0 && o.result.value < n, "join: bad last rank");
}

// Ranks that call join() early while rank 0 goes on: they contribute zeros to allreduces
// (plain and grouped), no rows to allgathers, and still receive broadcasts from rank 0.
void join_early(Rank& k) {
  const int n = k.size(), r = k.rank();
  auto join = [&] { return k.run(Rank::request(OpType::kJoin, "join", nullptr, nullptr, DataType::kUInt8, {})); };
  if (r == 0) {
    for (int i = 0; i < 2; ++i) {  // (integers: any byte the joined ranks add shows)
      std::vector<int32_t> z(5, 1);
      if (k.succeeded(k.run(Rank::request(OpType::kAllreduce, "tail." + std::to_string(i), z.data(), z.data(),
                                          DataType::kInt32, {5})),
                      "allreduce after the others joined"))
        k.expect(z == std::vector<int32_t>(5, 1), "allreduce after the others joined: wrong values");
    }
    std::vector<float> a(3, 1.f), b(2, 2.f);
    auto group = Rank::request(OpType::kAllreduce, "tail.group", nullptr, nullptr, DataType::kFloat32, {5});
    group.members = {{a.data(), a.data(), 12}, {b.data(), b.data(), 8}};
    hs::append_member_shape(&group.meta.splits, {3});
    hs::append_member_shape(&group.meta.splits, {2});
    if (k.succeeded(k.run(group), "grouped allreduce after the others joined"))
      k.expect(all_equal(a, 1.f) && all_equal(b, 2.f), "grouped allreduce after the others joined: wrong values");
    // As in Horovod, an allgather, a broadcast (from any root) and an alltoall cannot run while
    // ranks have joined.
    std::vector<int32_t> rows = {7, 8};
    k.failed_with(k.run(Rank::request(OpType::kAllgather, "tail.gather", rows.data(), nullptr, DataType::kInt32, {2})),
                  {"'tail.gather'", "join"}, "allgather after the others joined");
    std::vector<int32_t> bc(100, 42);
    auto req = Rank::request(OpType::kBroadcast, "tail.bcast", bc.data(), bc.data(), DataType::kInt32, {100});
    k.failed_with(k.run(req), {"'tail.bcast'", "join"}, "broadcast from rank 0 after the others joined");
    req.meta.name = "tail.bad_root";
    req.meta.root = 1;
    k.failed_with(k.run(req), {"'tail.bad_root'", "join"}, "broadcast from a joined root");
    std::vector<int32_t> a2a(static_cast<size_t>(n));
    k.failed_with(
        k.run(Rank::request(OpType::kAlltoall, "tail.a2a", a2a.data(), nullptr, DataType::kInt32, {int64_t(n)})),
        {"'tail.a2a'", "join"}, "alltoall after the others joined");
  }
  Outcome o = join();
  if (k.succeeded(o, "join"))
    k.expect(o.result.value == 0, "join: rank 0 joined last, got " + std::to_string(o.result.value));
  // The next round starts clean: everyone takes part again.
  std::vector<float> v(3, float(r + 1));
  if (k.succeeded(k.run(sum_of("after.join", v)), "allreduce after join"))
    k.expect(all_equal(v, float(n * (n + 1) / 2)), "allreduce after join: wrong values");
}

hs::TensorRequest add_set(const std::string& name, std::vector<int64_t> ranks) {
  auto req = Rank::request(OpType::kAddProcessSet, name, nullptr, nullptr, DataType::kUInt8, {});
  req.meta.splits = std::move(ranks);
  return req;
}

// Two process sets on four ranks ({0, 2} and {1, 3}), used at the same time; rank 0 coordinates
// the set it is not in. Then the errors: a non-member, a duplicate set, a removed set.
void process_sets(Rank& k) {
  const int r = k.rank();
  Outcome a = k.run(add_set("__add_process_set__.1", {0, 2}));
  Outcome b = k.run(add_set("__add_process_set__.2", {1, 3}));
  if (!k.succeeded(a, "add_process_set [0, 2]") || !k.succeeded(b, "add_process_set [1, 3]")) return;
  const int32_t mine = r % 2 == 0 ? a.result.value : b.result.value,
                other = r % 2 == 0 ? b.result.value : a.result.value;
  std::vector<int32_t> members;
  k.expect(k.engine().process_set_ranks(mine, &members) &&
               members == (r % 2 == 0 ? std::vector<int32_t>{0, 2} : std::vector<int32_t>{1, 3}),
           "process_set_ranks: wrong members");
  for (int step = 0; step < 5; ++step) {  // cached from the second step on, in both sets
    std::vector<float> x(1000, float(r + step));
    auto avg = sum_of("ps.x", x, mine);
    avg.meta.op = ReduceOp::kAverage;
    if (k.succeeded(k.run(avg), "allreduce in a process set"))
      k.expect(all_equal(x, float((r % 2 == 0 ? 2 : 4) / 2 + step)), "allreduce in a process set: wrong values");
  }
  std::vector<int32_t> g = {r, r};
  Outcome gathered =
      k.run(Rank::request(OpType::kAllgather, "ps.g", g.data(), nullptr, DataType::kInt32, {1, 2}, mine));
  if (k.succeeded(gathered, "allgather in a process set"))
    k.expect(as<int32_t>(gathered.result.data) == std::vector<int32_t>{r % 2, r % 2, r % 2 + 2, r % 2 + 2},
             "allgather in a process set: wrong data");
  std::vector<int32_t> bc(20, r);
  auto bcast = Rank::request(OpType::kBroadcast, "ps.b", bc.data(), bc.data(), DataType::kInt32, {20}, mine);
  bcast.meta.root = 1;  // the set's second member: global rank 2 or 3
  if (k.succeeded(k.run(bcast), "broadcast in a process set"))
    k.expect(bc == std::vector<int32_t>(20, r % 2 + 2), "broadcast in a process set: wrong data");
  // A member's shape differs: both members fail, naming the tensor; the other set is untouched.
  std::vector<float> m(size_t(r < 2 ? 4 : 5));
  k.failed_with(k.run(sum_of("ps.mismatch", m, mine)), {"'ps.mismatch'", "[4]", "[5]"}, "mismatch in a process set");
  std::vector<float> y(3);
  k.failed_with(k.run(sum_of("ps.outsider", y, other)), {"not a member"}, "allreduce in a set this rank is not in");
  k.failed_with(k.run(add_set("__add_process_set__.3", {2, 0})), {"already exists"}, "duplicate process set");
  auto remove =
      Rank::request(OpType::kRemoveProcessSet, "__remove_process_set__.1", nullptr, nullptr, DataType::kUInt8, {});
  remove.meta.root = a.result.value;
  k.succeeded(k.run(remove), "remove_process_set");
  remove.meta.name = "__remove_process_set__.2";
  remove.meta.root = b.result.value;
  k.succeeded(k.run(remove), "remove_process_set");
  k.failed_with(k.run(sum_of("ps.gone", y, mine)), {"unknown process set"}, "allreduce in a removed set");
  std::vector<float> z(3, 1.f);
  if (k.succeeded(k.run(sum_of("global.after.sets", z)), "global allreduce after the sets"))
    k.expect(all_equal(z, float(k.size())), "global allreduce after the sets: wrong values");
}

// Two threads per rank submitting blocking allreduces in crossing orders, a third waiting on
// asynchronous ones, while rank 0 switches its timeline on and off.
void threads_and_timeline(Rank& k, const std::string& timeline_path) {
  const int n = k.size(), r = k.rank();
  std::atomic<bool> running{true};
  auto loop = [&](const std::string& name, int offset) {
    std::vector<float> x(256);
    for (int i = 0; i < 60; ++i) {
      std::fill(x.begin(), x.end(), float(r + i + offset));
      if (k.succeeded(k.run_blocking(sum_of(name, x)), name))
        k.expect(all_equal(x, float(n * (i + offset) + n * (n - 1) / 2)), name + ": wrong values");
    }
  };
  auto async_loop = [&] {
    for (int i = 0; i < 20; ++i) {
      std::vector<std::vector<float>> t(4, std::vector<float>(50, float(r)));
      std::vector<int64_t> h;
      for (int j = 0; j < 4; ++j) h.push_back(k.submit(sum_of("async." + std::to_string(j), t[size_t(j)])));
      for (int j = 0; j < 4; ++j)
        if (k.succeeded(k.wait(h[size_t(j)]), "async allreduce"))
          k.expect(all_equal(t[size_t(j)], float(n * (n - 1) / 2)), "async allreduce: wrong values");
    }
  };
  std::thread toggler([&] {
    if (r != 0) return;
    while (running) {
      k.engine().timeline().start(timeline_path, true);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      k.engine().timeline().stop();
    }
  });
  // Each rank starts its threads in the opposite order, so their first requests cross.
  std::vector<std::thread> threads;
  if (r % 2 == 0) threads.emplace_back(loop, "t1", 0);
  threads.emplace_back(loop, "t2", 1000);
  if (r % 2 == 1) threads.emplace_back(loop, "t1", 0);
  threads.emplace_back(async_loop);
  for (auto& t : threads) t.join();
  running = false;
  toggler.join();
}

}  // namespace

// The lane's bookkeeping of speculative submissions (no engine): three ranks, cache id 0 of tensor 0.
void lane_speculation_outcomes() {
  using Outcome = hs::CachedLane::Outcome;
  hs::CachedLane lane(3);
  lane.add_id(0, 0);
  auto check = [](bool ok, const char* what) { hs_test::expect(ok, -1, std::string("cached lane: ") + what); };
  // Every rank early as op 7: complete, and no response is due.
  check(lane.add(0, 0, 7) == Outcome::kWaiting, "first early rank waits");
  check(lane.add(2, 0, 7) == Outcome::kWaiting, "second early rank waits");
  check(lane.add(1, 0, 7) == Outcome::kSpeculated, "the last early rank completes it by speculation");
  check(lane.waiting().empty(), "nothing is left waiting");
  // Plain submissions complete as before.
  check(lane.add(0, 0) == Outcome::kWaiting && lane.add(1, 0) == Outcome::kWaiting, "plain ranks wait");
  check(lane.add(2, 0) == Outcome::kComplete, "the last plain rank completes it");
  // A mix of early and plain ranks is for the general path, which gets each rank's op number.
  check(lane.add(0, 0, 8) == Outcome::kWaiting && lane.add(1, 0) == Outcome::kWaiting, "a mix waits");
  check(lane.add(2, 0, 8) == Outcome::kDeclined, "a mix is declined at its last rank");
  std::vector<hs::CachedLane::Sent> sent = lane.take(0);
  check(sent.size() == 2 && sent[0].rank == 0 && sent[0].spec_seq == 8 && sent[1].rank == 1 && sent[1].spec_seq == -1,
        "take() gives each rank's op number");
  // Different op numbers are declined at once.
  check(lane.add(0, 0, 9) == Outcome::kWaiting, "early rank waits");
  check(lane.add(1, 0, 10) == Outcome::kDeclined, "another op number is declined");
  check(lane.take(0).size() == 1, "the declined rank was not recorded");
}

void scenario_cached_lane() {
  std::fprintf(stderr, "  cached lane outcomes of speculative submissions\n");
  lane_speculation_outcomes();
  for (const char* topology : {"shm x3", "tcp x3"}) {
    const Topology& t = *std::find_if(topologies().begin(), topologies().end(),
                                      [&](const Topology& x) { return std::string(x.name) == topology; });
    std::fprintf(stderr, "  cached lane on %s\n", t.name);
    Job(t.host_ids).run([](Rank& k) {
      lane_random_rounds(k);
      lane_two_signatures(k);
      lane_join(k);
    });
  }
  hs::Config cfg = test_config();
  cfg.stall_check_disable = false;
  cfg.stall_check_seconds = 1;  // also how long a lane entry waits before the general path takes it
  std::fprintf(stderr, "  cached lane with a late rank (a stall warning is expected)\n");
  Job({"h", "h", "h"}, cfg).run(lane_late_rank);
}

void scenario_join() {
  for (const Topology& t : topologies()) {
    std::fprintf(stderr, "  join on %s\n", t.name);
    Job(t.host_ids).run(join_early);
  }
}

void scenario_process_sets() {
  std::fprintf(stderr, "  process sets on 2 hosts x2\n");
  Job({"a", "a", "b", "b"}).run(process_sets);
  std::fprintf(stderr, "  process sets on shm x4\n");
  Job({"h", "h", "h", "h"}).run(process_sets);
}

void scenario_threads(const std::string& timeline_path) {
  std::fprintf(stderr, "  threads and timeline on shm x2\n");
  Job({"h", "h"}).run([&](Rank& k) { threads_and_timeline(k, timeline_path); });
  std::fprintf(stderr, "  threads and timeline on 2 hosts x2\n");
  Job({"a", "a", "b", "b"}).run([&](Rank& k) { threads_and_timeline(k, timeline_path); });
}

}  // namespace hs_test
