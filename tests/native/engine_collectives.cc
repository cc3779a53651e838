// Every collective through the whole engine (negotiation, cache, fusion, execution) on each
// topology, with exact expected values: inputs are small integers, so every sum, product, min and
// max is exact in floating point whatever the reduction order.
#include <algorithm>
#include <numeric>

#include "engine_ranks.h"
#include "engine_scenarios.h"

namespace hs_test {

namespace {

using hs::DataType;
using hs::OpType;
using hs::ReduceOp;

// Rank r's element i: (r + 1) * (i % 7 + 1). Sum over n ranks: (i % 7 + 1) * n(n+1)/2.
std::vector<float> ramp(int r, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float((r + 1) * int(i % 7 + 1));
  return v;
}

void allreduce_sum(Rank& k, size_t count, bool in_place) {
  const int n = k.size();
  const std::string name = "sum." + std::to_string(count) + (in_place ? ".inplace" : "");
  std::vector<float> in = ramp(k.rank(), count), out(count, -1.f);
  float* dst = in_place ? in.data() : out.data();
  Outcome o = k.run(Rank::request(OpType::kAllreduce, name, in.data(), dst, DataType::kFloat32, {int64_t(count)}));
  if (!k.succeeded(o, name)) return;
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) bad += dst[i] != float(int(i % 7 + 1) * n * (n + 1) / 2);
  k.expect(bad == 0, name + ": " + std::to_string(bad) + " wrong elements");
}

void allreduce_ops(Rank& k) {
  const int n = k.size(), r = k.rank();
  // int32 Min / Max / Product over values r + 1 + i % 3.
  const size_t count = 1000;
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    std::vector<int32_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = r + 1 + int(i % 3);
    auto req = Rank::request(OpType::kAllreduce, std::string("op.") + hs::reduce_op_name(op), v.data(), v.data(),
                             DataType::kInt32, {int64_t(count)});
    req.meta.op = op;
    if (!k.succeeded(k.run(req), req.meta.name)) continue;
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      int32_t want = op == ReduceOp::kMin ? 1 + int(i % 3) : op == ReduceOp::kMax ? n + int(i % 3) : 1;
      if (op == ReduceOp::kProduct)
        for (int q = 0; q < n; ++q) want *= q + 1 + int(i % 3);
      bad += v[i] != want;
    }
    k.expect(bad == 0, req.meta.name + ": " + std::to_string(bad) + " wrong elements");
  }
  // float64 with a prescale and a postscale: (sum of 2 * (r + 1)) * 0.25.
  std::vector<double> d(33, double(r + 1));
  auto req = Rank::request(OpType::kAllreduce, "scaled", d.data(), d.data(), DataType::kFloat64, {33});
  req.meta.prescale = 2.0;
  req.meta.postscale = 0.25;
  if (k.succeeded(k.run(req), "scaled"))
    k.expect(std::all_of(d.begin(), d.end(), [&](double x) { return x == n * (n + 1) / 4.0; }), "scaled: wrong values");
  // Average where 1/n is exact.
  if (n == 2 || n == 4) {
    std::vector<float> a(100000, float(r * 4));  // over the direct/ring switch
    auto avg = Rank::request(OpType::kAllreduce, "average", a.data(), a.data(), DataType::kFloat32, {100000});
    avg.meta.op = ReduceOp::kAverage;
    if (k.succeeded(k.run(avg), "average"))
      k.expect(std::all_of(a.begin(), a.end(), [&](float x) { return x == 2.f * (n - 1); }), "average: wrong values");
  }
}

// Many small tensors submitted at once for several steps: they fuse, and from the second step on
// they travel as response-cache ids.
void fused_steps(Rank& k) {
  const int n = k.size(), r = k.rank();
  const int kTensors = 16, kSteps = 4;
  const auto before = k.engine().stats().requests_cached.load();
  std::vector<std::vector<float>> t(kTensors);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<int64_t> handles;
    for (int i = 0; i < kTensors; ++i) {
      t[size_t(i)].assign(size_t(5 + i), float(r + i));
      handles.push_back(k.submit(Rank::request(OpType::kAllreduce, "fuse." + std::to_string(i), t[size_t(i)].data(),
                                               t[size_t(i)].data(), DataType::kFloat32, {5 + i})));
    }
    for (int i = 0; i < kTensors; ++i) {
      const std::string what = "fuse." + std::to_string(i) + " step " + std::to_string(step);
      if (!k.succeeded(k.wait(handles[size_t(i)]), what)) continue;
      const float want = float(n * i + n * (n - 1) / 2);
      k.expect(std::all_of(t[size_t(i)].begin(), t[size_t(i)].end(), [&](float x) { return x == want; }),
               what + ": wrong values");
    }
  }
  const auto cached = k.engine().stats().requests_cached.load() - before;
  k.expect(cached >= kTensors * (kSteps - 1),
           "only " + std::to_string(cached) + " requests went as cache ids in steady state");
}

// A packed group (one request for several tensors), small and large (the large one may run
// straight between the tensors on shared memory), with an empty member and a prescale.
void grouped(Rank& k) {
  const int n = k.size(), r = k.rank();
  for (size_t big : {size_t(7), size_t(40000)}) {
    std::vector<std::vector<float>> m = {std::vector<float>(big, float(r + 1)), {}, std::vector<float>(3, 1.f)};
    auto req = Rank::request(OpType::kAllreduce, "group." + std::to_string(big), nullptr, nullptr, DataType::kFloat32,
                             {int64_t(big + 3)});
    req.meta.prescale = 2.0;
    for (auto& x : m) {
      req.members.push_back({x.data(), x.data(), x.size() * sizeof(float)});
      hs::append_member_shape(&req.meta.splits, {int64_t(x.size())});
    }
    if (!k.succeeded(k.run(req), req.meta.name)) continue;
    k.expect(std::all_of(m[0].begin(), m[0].end(), [&](float x) { return x == float(n * (n + 1)); }) &&
                 std::all_of(m[2].begin(), m[2].end(), [&](float x) { return x == float(2 * n); }),
             req.meta.name + ": wrong values");
  }
}

void allgather(Rank& k) {
  const int n = k.size(), r = k.rank();
  // Rank q contributes q + 1 rows of 3 int64: (q, row, column) packed into each value.
  std::vector<int64_t> in(size_t(3 * (r + 1)));
  for (size_t i = 0; i < in.size(); ++i) in[i] = r * 1000 + int64_t(i);
  Outcome o = k.run(Rank::request(OpType::kAllgather, "gather", in.data(), nullptr, DataType::kInt64, {r + 1, 3}));
  if (!k.succeeded(o, "allgather")) return;
  std::vector<int64_t> want;
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 3 * (q + 1); ++i) want.push_back(q * 1000 + i);
  const int64_t rows = int64_t(n) * (n + 1) / 2;
  k.expect(as<int64_t>(o.result.data) == want, "allgather: wrong data");
  k.expect(o.result.shape == std::vector<int64_t>{rows, 3}, "allgather: wrong shape");
}

void broadcast(Rank& k) {
  const int root = 1 % k.size();
  for (size_t count : {size_t(10), size_t(50000)}) {  // direct, and a chain for 3+ ranks
    std::vector<int32_t> in(count), out(count, -1);
    for (size_t i = 0; i < count; ++i) in[i] = k.rank() * 7 + int32_t(i);
    auto req = Rank::request(OpType::kBroadcast, "bcast." + std::to_string(count), in.data(), out.data(),
                             DataType::kInt32, {int64_t(count)});
    req.meta.root = root;
    if (!k.succeeded(k.run(req), req.meta.name)) continue;
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) bad += out[i] != root * 7 + int32_t(i);
    k.expect(bad == 0, req.meta.name + ": " + std::to_string(bad) + " wrong elements");
  }
}

void alltoall(Rank& k) {
  const int n = k.size(), r = k.rank();
  // With splits: rank r sends (2r + p) % 3 rows of 2 floats to p, each naming (sender, receiver, row).
  std::vector<int64_t> splits;
  std::vector<float> in;
  for (int p = 0; p < n; ++p) {
    splits.push_back((2 * r + p) % 3);
    for (int row = 0; row < (2 * r + p) % 3; ++row) in.insert(in.end(), 2, float(r * 100 + p * 10 + row));
  }
  const int64_t rows = int64_t(in.size() / 2);
  auto req = Rank::request(OpType::kAlltoall, "a2a.splits", in.data(), nullptr, DataType::kFloat32, {rows, 2});
  req.meta.splits = splits;
  Outcome o = k.run(req);
  if (k.succeeded(o, "alltoall with splits")) {
    std::vector<float> want;
    std::vector<int64_t> got_splits;
    for (int q = 0; q < n; ++q) {
      got_splits.push_back((2 * q + r) % 3);
      for (int row = 0; row < (2 * q + r) % 3; ++row) want.insert(want.end(), 2, float(q * 100 + r * 10 + row));
    }
    k.expect(as<float>(o.result.data) == want, "alltoall with splits: wrong data");
    k.expect(o.result.splits == got_splits, "alltoall with splits: wrong received splits");
  }
  // Without splits: the first dimension divides evenly.
  std::vector<int32_t> even(size_t(2 * n));
  for (size_t i = 0; i < even.size(); ++i) even[i] = r * 100 + int32_t(i);
  o = k.run(Rank::request(OpType::kAlltoall, "a2a.even", even.data(), nullptr, DataType::kInt32, {2 * n}));
  if (k.succeeded(o, "alltoall")) {
    std::vector<int32_t> want;
    for (int q = 0; q < n; ++q) want.insert(want.end(), {q * 100 + 2 * r, q * 100 + 2 * r + 1});
    k.expect(as<int32_t>(o.result.data) == want, "alltoall: wrong data");
  }
}

void reducescatter(Rank& k) {
  const int n = k.size(), r = k.rank();
  const int64_t dim0 = 2 * n + 1, cols = 5;
  std::vector<float> in(size_t(dim0 * cols));
  for (size_t i = 0; i < in.size(); ++i) in[i] = float((r + 1) * int(i % 11));
  Outcome o = k.run(Rank::request(OpType::kReducescatter, "rs", in.data(), nullptr, DataType::kFloat32, {dim0, cols}));
  if (!k.succeeded(o, "reducescatter")) return;
  // Rows are dealt out in rank order, the first dim0 % n ranks getting one more.
  const int64_t first = r * (dim0 / n) + std::min<int64_t>(r, dim0 % n);
  const int64_t mine = dim0 / n + (r < dim0 % n ? 1 : 0);
  std::vector<float> want;
  for (int64_t i = first * cols; i < (first + mine) * cols; ++i) want.push_back(float(int(i % 11) * n * (n + 1) / 2));
  k.expect(as<float>(o.result.data) == want, "reducescatter: wrong data");
  k.expect(o.result.shape == std::vector<int64_t>{mine, cols}, "reducescatter: wrong shape");
}

// Collectives of odd byte counts and of 8-byte elements back to back: on a TCP link the second
// one's data may arrive in the same read as the first's, and must still be reduced from addresses
// aligned for its type.
void odd_then_wide(Rank& k) {
  const int n = k.size(), r = k.rank();
  for (int i = 0; i < 20; ++i) {
    std::vector<uint8_t> odd(7, uint8_t(r + 1));
    std::vector<int64_t> wide(3001, r + 1);
    std::vector<double> real(501, double(r + 1));
    const int64_t h[] = {
        k.submit(Rank::request(OpType::kAllreduce, "odd", odd.data(), odd.data(), DataType::kUInt8, {7})),
        k.submit(Rank::request(OpType::kAllreduce, "wide", wide.data(), wide.data(), DataType::kInt64, {3001})),
        k.submit(Rank::request(OpType::kAllreduce, "real", real.data(), real.data(), DataType::kFloat64, {501}))};
    const char* names[] = {"odd", "wide", "real"};
    for (int j = 0; j < 3; ++j) k.succeeded(k.wait(h[j]), names[j]);
    const int sum = n * (n + 1) / 2;
    k.expect(odd == std::vector<uint8_t>(7, uint8_t(sum)) && wide == std::vector<int64_t>(3001, sum) &&
                 real == std::vector<double>(501, double(sum)),
             "odd/wide/real: wrong values");
  }
}

// Empty tensors, whose buffers are null (as an empty torch tensor's data_ptr() is): every
// collective completes without touching memory.
void empty_tensors(Rank& k) {
  for (OpType type :
       {OpType::kAllreduce, OpType::kBroadcast, OpType::kAllgather, OpType::kAlltoall, OpType::kReducescatter}) {
    const std::string name = std::string("empty.") + hs::op_type_name(type);
    Outcome o = k.run(Rank::request(type, name, nullptr, nullptr, DataType::kFloat32, {0, 3}));
    if (k.succeeded(o, name) && o.result.has_data)
      k.expect(o.result.data.empty() && o.result.shape == std::vector<int64_t>{0, 3}, name + ": wrong result");
  }
  auto group = Rank::request(OpType::kAllreduce, "empty.group", nullptr, nullptr, DataType::kFloat32, {0});
  group.members = {{nullptr, nullptr, 0}, {nullptr, nullptr, 0}};
  hs::append_member_shape(&group.meta.splits, {0});
  hs::append_member_shape(&group.meta.splits, {0, 2});
  k.succeeded(k.run(group), "grouped allreduce of empty members");
}

// The same small allreduce from a caller that blocks at once: on shared memory its input goes
// out before negotiation (speculation).
void blocking_repeats(Rank& k, bool all_shared_memory) {
  const int n = k.size();
  const auto sent_before = k.engine().stats().speculative_sent.load();
  for (int i = 0; i < 30; ++i) {
    std::vector<float> v(16, float(k.rank() + i));
    Outcome o =
        k.run_blocking(Rank::request(OpType::kAllreduce, "blocking", v.data(), v.data(), DataType::kFloat32, {16}));
    if (!k.succeeded(o, "blocking allreduce " + std::to_string(i))) continue;
    k.expect(v[0] == float(n * i + n * (n - 1) / 2) && v[15] == v[0], "blocking allreduce: wrong values");
  }
  if (all_shared_memory)
    k.expect(k.engine().stats().speculative_sent.load() > sent_before, "no small allreduce went out early");
  // Blocking broadcasts (a root per ten rounds) and allgathers into an offered output: the same early path.
  const auto done_before = k.engine().stats().speculative_done.load();
  for (int i = 0; i < 30; ++i) {
    const int root = (i / 10) % n;
    std::vector<float> b(16, float(k.rank() * 100 + i));
    auto bcast = Rank::request(OpType::kBroadcast, "blocking.bcast", b.data(), b.data(), DataType::kFloat32, {16});
    bcast.meta.root = root;
    if (k.succeeded(k.run_blocking(bcast), "blocking broadcast " + std::to_string(i)))
      k.expect(b[0] == float(root * 100 + i) && b[15] == b[0], "blocking broadcast: wrong values");
    std::vector<float> mine(4, float(k.rank() * 100 + i)), all(size_t(4 * n), -1.0f);
    auto gather =
        Rank::request(OpType::kAllgather, "blocking.gather", mine.data(), all.data(), DataType::kFloat32, {4});
    gather.out_bytes = all.size() * sizeof(float);
    Outcome o = k.run_blocking(gather);
    if (!k.succeeded(o, "blocking allgather " + std::to_string(i))) continue;
    k.expect(!o.result.has_data, "blocking allgather: the offered output was not used");
    for (int q = 0; q < n; ++q)
      k.expect(all[size_t(4 * q)] == float(q * 100 + i) && all[size_t(4 * q + 3)] == float(q * 100 + i),
               "blocking allgather: wrong values");
  }
  if (all_shared_memory)
    k.expect(k.engine().stats().speculative_done.load() > done_before, "no broadcast or allgather finished early");
}

// Messages large enough to travel single-copy with the default settings, whose copies the
// senders share when their threads get to it (transport/single_copy.h; engine_shared_copy.cc tests
// the sharing step by step): an alltoall and an allgather of odd sizes, then broadcasts from each
// root (2 ranks: direct; 3+: a chain of chunks of 1 MiB and more).
void shared_copies(Rank& k) {
  const int n = k.size(), r = k.rank();
  const size_t piece = (size_t(5) << 16) + 1;  // 1.25 MiB of int32 + 4 bytes to every rank
  std::vector<int32_t> in(piece * size_t(n));
  for (size_t i = 0; i < in.size(); ++i) in[i] = int32_t(r * 100000000 + int(i));
  Outcome o =
      k.run(Rank::request(OpType::kAlltoall, "shared.a2a", in.data(), nullptr, DataType::kInt32, {int64_t(in.size())}));
  if (k.succeeded(o, "large alltoall")) {
    const auto got = as<int32_t>(o.result.data);
    size_t bad = got.size() == in.size() ? 0 : in.size();
    for (size_t q = 0; bad == 0 && q < size_t(n); ++q)
      for (size_t i = 0; i < piece; ++i) bad += got[q * piece + i] != int32_t(q * 100000000 + r * piece + i);
    k.expect(bad == 0, "large alltoall: " + std::to_string(bad) + " wrong elements");
  }
  const size_t block = (size_t(3) << 19) + 5;  // 3 MiB of int16 + 10 bytes from every rank
  std::vector<int16_t> mine(block, int16_t(r + 1));
  o = k.run(
      Rank::request(OpType::kAllgather, "shared.gather", mine.data(), nullptr, DataType::kInt16, {int64_t(block)}));
  if (k.succeeded(o, "large allgather")) {
    const auto got = as<int16_t>(o.result.data);
    size_t bad = got.size() == block * size_t(n) ? 0 : got.size() + 1;
    for (size_t i = 0; bad == 0 && i < got.size(); ++i) bad += got[i] != int16_t(i / block + 1);
    k.expect(bad == 0, "large allgather: " + std::to_string(bad) + " wrong elements");
  }
  const size_t count = ((n == 2 ? size_t(3) : size_t(17)) << 18) + 3;  // 3 or 17 MiB of int32, + 12 bytes
  std::vector<int32_t> buf(count);
  for (int round = 0; round < 2; ++round) {
    for (int root = 0; root < n; ++root) {
      for (size_t i = 0; i < count; ++i) buf[i] = r == root ? root * 1000003 + int32_t(i + round) : -1;
      const std::string name = "shared.bcast." + std::to_string(root);
      auto req = Rank::request(OpType::kBroadcast, name, buf.data(), buf.data(), DataType::kInt32, {int64_t(count)});
      req.meta.root = root;
      if (!k.succeeded(k.run(req), name)) return;
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) bad += buf[i] != root * 1000003 + int32_t(i + round);
      k.expect(bad == 0, name + ": " + std::to_string(bad) + " wrong elements");
    }
  }
}

// Every collective above on one topology. `shared`: every rank on one host.
void all_collectives(Rank& k, bool shared) {
  allreduce_sum(k, 7, false);
  allreduce_sum(k, 30000, true);  // over the direct/ring switch
  allreduce_ops(k);
  fused_steps(k);
  grouped(k);
  allgather(k);
  broadcast(k);
  alltoall(k);
  reducescatter(k);
  empty_tensors(k);
  odd_then_wide(k);
  k.expect(k.run(Rank::request(OpType::kBarrier, "__barrier__", nullptr, nullptr, DataType::kUInt8, {})).ok(),
           "barrier failed");
  blocking_repeats(k, shared);
}

}  // namespace

void scenario_collectives() {
  for (const Topology& t : topologies()) {
    std::fprintf(stderr, "  collectives on %s\n", t.name);
    const bool shared = std::all_of(t.host_ids.begin(), t.host_ids.end(), [&](auto& h) { return h == t.host_ids[0]; });
    Job(t.host_ids).run([&](Rank& k) { all_collectives(k, shared); });
  }
  for (const Topology& t : {Topology{"shm x2", {"h", "h"}}, Topology{"shm x3", {"h", "h", "h"}}}) {
    std::fprintf(stderr, "  large messages on %s, copies shared by sender and receiver\n", t.name);
    Job(t.host_ids).run([&](Rank& k) { shared_copies(k); });
  }
  // Single-copy transfers (transport/single_copy.h) from a size most of the messages above reach,
  // fused and scattered ones included; on two hosts only the shared-memory pairs take them.
  hs::Config single_copy = test_config();
  single_copy.shm_single_copy_bytes = 4096;
  for (const Topology& t : {Topology{"shm x3", {"h", "h", "h"}}, Topology{"2 hosts x2", {"a", "a", "b", "b"}}}) {
    std::fprintf(stderr, "  collectives on %s, single-copy from 4 KiB\n", t.name);
    const bool shared = t.host_ids.front() == t.host_ids.back();
    Job(t.host_ids, single_copy).run([&](Rank& k) {
      all_collectives(k, shared);
      k.expect(k.engine().single_copy_bytes() > (int64_t(1) << 20),
               "hardly any bytes travelled single-copy: " + std::to_string(k.engine().single_copy_bytes()));
    });
  }
}

}  // namespace hs_test
