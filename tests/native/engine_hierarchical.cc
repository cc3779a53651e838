// Two-level allreduce and allgather (collectives/hierarchical.h) through the whole engine, on even,
// uneven and interleaved placements of ranks on hosts, with HOROVOD_HIERARCHICAL_* automatic, on
// and off: which algorithm ran, and exact results (small integers, whose sums and products are
// exact in any order) for every dtype and op, fused and grouped tensors, pre/postscale, allgather
// with rows that differ per rank, process sets; and the same bits on every rank for inexact sums.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "collectives/hierarchical.h"
#include "common/half.h"
#include "engine_ranks.h"
#include "engine_scenarios.h"

namespace hs_test {

namespace {

using hs::DataType;
using hs::OpType;
using hs::ReduceOp;
using hs::Switch;

struct Placement {
  const char* name;
  std::vector<std::string> hosts;
  bool automatic;  // two levels when HOROVOD_HIERARCHICAL_* is unset
  bool forced;     // ... and when it is 1
};

const std::vector<Placement>& placements() {
  static const std::vector<Placement> p = {
      {"2 hosts x2", {"a", "a", "b", "b"}, true, true},
      {"3 hosts x2", {"a", "a", "b", "b", "c", "c"}, true, true},
      {"hosts of 1, 2, 3", {"a", "b", "b", "c", "c", "c"}, false, true},
      {"hosts of 2, 1, 3 interleaved", {"a", "b", "c", "a", "c", "c"}, false, true},
      {"3 hosts x2 interleaved", {"a", "b", "c", "a", "b", "c"}, true, true},
      {"1 host", {"h", "h", "h"}, false, false},
  };
  return p;
}

// Rank r's element i of a small-integer input: exact in every dtype below, and so are sums of 6.
int value(int r, size_t i) { return (r + 1) * int(i % 5 + 1); }
int sum_of_values(int n, size_t i) { return int(i % 5 + 1) * n * (n + 1) / 2; }

// Element i of a buffer of `dtype` as a double (float16/bfloat16 through their bits).
double element(const std::vector<uint8_t>& b, DataType dt, size_t i) {
  const uint8_t* p = b.data() + i * hs::dtype_size(dt);
  uint16_t h;
  switch (dt) {
    case DataType::kUInt8: return *p;
    case DataType::kInt8: return *reinterpret_cast<const int8_t*>(p);
    case DataType::kInt32: return *reinterpret_cast<const int32_t*>(p);
    case DataType::kInt64: return double(*reinterpret_cast<const int64_t*>(p));
    case DataType::kFloat32: return *reinterpret_cast<const float*>(p);
    case DataType::kFloat64: return *reinterpret_cast<const double*>(p);
    case DataType::kFloat16: std::memcpy(&h, p, 2); return hs::half_to_float(h);
    case DataType::kBFloat16: std::memcpy(&h, p, 2); return hs::bfloat16_to_float(h);
    default: return -1;
  }
}

void set_element(std::vector<uint8_t>& b, DataType dt, size_t i, int v) {
  uint8_t* p = b.data() + i * hs::dtype_size(dt);
  uint16_t h;
  switch (dt) {
    case DataType::kUInt8: *p = uint8_t(v); break;
    case DataType::kInt8: *reinterpret_cast<int8_t*>(p) = int8_t(v); break;
    case DataType::kInt32: *reinterpret_cast<int32_t*>(p) = v; break;
    case DataType::kInt64: *reinterpret_cast<int64_t*>(p) = v; break;
    case DataType::kFloat32: *reinterpret_cast<float*>(p) = float(v); break;
    case DataType::kFloat64: *reinterpret_cast<double*>(p) = v; break;
    case DataType::kFloat16:
      h = hs::float_to_half(float(v));
      std::memcpy(p, &h, 2);
      break;
    case DataType::kBFloat16:
      h = hs::float_to_bfloat16(float(v));
      std::memcpy(p, &h, 2);
      break;
    default: break;
  }
}

// Sum of every dtype, sizes on both sides of the direct/ring and bidirectional switches, in and out
// of place; Min, Max and Product; Average and pre/postscale.
void reductions(Rank& k) {
  const int n = k.size(), r = k.rank();
  const DataType dtypes[] = {DataType::kUInt8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
                             DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
  for (DataType dt : dtypes)
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(40000), size_t(300001)}) {
      if (count > 40000 && dt != DataType::kFloat32) continue;  // (the bidirectional rings: one dtype is enough)
      const size_t es = hs::dtype_size(dt);
      std::vector<uint8_t> in(count * es), out(count * es);
      for (size_t i = 0; i < count; ++i) set_element(in, dt, i, value(r, i));
      const bool in_place = count % 2 == 1;
      uint8_t* dst = in_place ? in.data() : out.data();
      const std::string name = std::string("h.sum.") + hs::dtype_name(dt) + "." + std::to_string(count);
      if (!k.succeeded(k.run(Rank::request(OpType::kAllreduce, name, in.data(), dst, dt, {int64_t(count)})), name))
        continue;
      const std::vector<uint8_t>& got = in_place ? in : out;
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) bad += element(got, dt, i) != double(sum_of_values(n, i));
      k.expect(bad == 0, name + ": " + std::to_string(bad) + " wrong elements");
    }
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    std::vector<int32_t> v(30001);
    for (size_t i = 0; i < v.size(); ++i) v[i] = r + 1 + int(i % 3);
    auto req = Rank::request(OpType::kAllreduce, std::string("h.op.") + hs::reduce_op_name(op), v.data(), v.data(),
                             DataType::kInt32, {int64_t(v.size())});
    req.meta.op = op;
    if (!k.succeeded(k.run(req), req.meta.name)) continue;
    size_t bad = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      int32_t want = op == ReduceOp::kMin ? 1 + int(i % 3) : op == ReduceOp::kMax ? n + int(i % 3) : 1;
      if (op == ReduceOp::kProduct)
        for (int q = 0; q < n; ++q) want *= q + 1 + int(i % 3);
      bad += v[i] != want;
    }
    k.expect(bad == 0, req.meta.name + ": " + std::to_string(bad) + " wrong elements");
  }
  std::vector<double> d(70001, double(r + 1));
  auto scaled = Rank::request(OpType::kAllreduce, "h.scaled", d.data(), d.data(), DataType::kFloat64, {70001});
  scaled.meta.prescale = 2.0;
  scaled.meta.postscale = 0.25;
  if (k.succeeded(k.run(scaled), "h.scaled"))
    k.expect(std::all_of(d.begin(), d.end(), [&](double x) { return x == n * (n + 1) / 4.0; }), "h.scaled: wrong");
  std::vector<double> a(50000, double(r * n));
  auto avg = Rank::request(OpType::kAllreduce, "h.average", a.data(), a.data(), DataType::kFloat64, {50000});
  avg.meta.op = ReduceOp::kAverage;
  const double want = double(n) * (n - 1) / 2;
  if (k.succeeded(k.run(avg), "h.average"))
    k.expect(std::all_of(a.begin(), a.end(), [&](double x) { return std::fabs(x - want) <= 1e-12 * want; }),
             "h.average: wrong values");
}

// Tensors submitted together (fused, small and over 64 KiB in all) and a packed group.
void fused(Rank& k) {
  const int n = k.size(), r = k.rank();
  std::vector<std::vector<float>> t;
  std::vector<int64_t> handles;
  for (int i = 0; i < 12; ++i) {
    t.emplace_back(size_t(3 + i * 1500), float(r + i));
    handles.push_back(k.submit(Rank::request(OpType::kAllreduce, "h.fuse." + std::to_string(i), t.back().data(),
                                             t.back().data(), DataType::kFloat32, {int64_t(t.back().size())})));
  }
  for (int i = 0; i < 12; ++i) {
    const std::string what = "h.fuse." + std::to_string(i);
    if (!k.succeeded(k.wait(handles[size_t(i)]), what)) continue;
    const float want = float(n * i + n * (n - 1) / 2);
    k.expect(std::all_of(t[size_t(i)].begin(), t[size_t(i)].end(), [&](float x) { return x == want; }),
             what + ": wrong values");
  }
  std::vector<std::vector<float>> m = {std::vector<float>(40000, float(r + 1)), {}, std::vector<float>(5, 1.f)};
  auto req = Rank::request(OpType::kAllreduce, "h.group", nullptr, nullptr, DataType::kFloat32, {40005});
  for (auto& x : m) {
    req.members.push_back({x.data(), x.data(), x.size() * sizeof(float)});
    hs::append_member_shape(&req.meta.splits, {int64_t(x.size())});
  }
  if (k.succeeded(k.run(req), "h.group"))
    k.expect(std::all_of(m[0].begin(), m[0].end(), [&](float x) { return x == float(n * (n + 1) / 2); }) &&
                 std::all_of(m[2].begin(), m[2].end(), [&](float x) { return x == float(n); }),
             "h.group: wrong values");
}

// Rank q gives rows(q) rows of 3 int64 (q, row, column packed in each); some ranks give none.
void gathers(Rank& k, int32_t process_set, const std::vector<int>& members) {
  const int r = k.rank();
  for (int scale : {1, 4000}) {  // small (direct) and large (rings) totals
    auto rows = [&](int q) { return int64_t((q % 3) * scale); };
    std::vector<int64_t> in(size_t(3 * rows(r)));
    for (size_t i = 0; i < in.size(); ++i) in[i] = r * 1000000 + int64_t(i);
    const std::string name = "h.gather." + std::to_string(process_set) + "." + std::to_string(scale);
    Outcome o =
        k.run(Rank::request(OpType::kAllgather, name, in.data(), nullptr, DataType::kInt64, {rows(r), 3}, process_set));
    if (!k.succeeded(o, name)) continue;
    std::vector<int64_t> want;
    int64_t total = 0;
    for (int q : members) {
      for (int64_t i = 0; i < 3 * rows(q); ++i) want.push_back(q * 1000000 + i);
      total += rows(q);
    }
    k.expect(as<int64_t>(o.result.data) == want, name + ": wrong data");
    k.expect(o.result.shape == std::vector<int64_t>{total, 3}, name + ": wrong shape");
  }
}

// An inexact float sum: the ranks' results must agree bit for bit.
void same_bits(Rank& k, std::vector<std::vector<float>>& results) {
  std::vector<float> v(70001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(float(i) * 0.37f + float(k.rank()));
  if (!k.succeeded(k.run(Rank::request(OpType::kAllreduce, "h.bits", v.data(), v.data(), DataType::kFloat32,
                                       {int64_t(v.size())})),
                   "h.bits"))
    return;
  results[size_t(k.rank())] = v;
  k.sync();
  k.expect(std::memcmp(results[0].data(), v.data(), v.size() * sizeof(float)) == 0,
           "h.bits: this rank's sum differs from rank 0's");
  k.sync();
}

hs::TensorRequest add_set(const std::vector<int64_t>& ranks) {
  auto req = Rank::request(OpType::kAddProcessSet, "__add_process_set__.h", nullptr, nullptr, DataType::kUInt8, {});
  req.meta.splits = ranks;
  return req;
}

// The first four of six ranks as a process set: its own host layout decides for it.
void process_set(Rank& k, const Placement& p, Switch setting) {
  const int r = k.rank();
  Outcome added = k.run(add_set({0, 1, 2, 3}));
  if (!k.succeeded(added, "add_process_set [0, 1, 2, 3]") || r >= 4) return;
  const int32_t id = added.result.value;
  const hs::HostLayout layout({p.hosts.begin(), p.hosts.begin() + 4}, r);
  k.expect(k.engine().hierarchical(id, OpType::kAllreduce) == layout.applies(setting), "process set: wrong algorithm");
  std::vector<float> v(90001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(value(r, i));
  if (k.succeeded(k.run(Rank::request(OpType::kAllreduce, "h.ps.sum", v.data(), v.data(), DataType::kFloat32,
                                      {int64_t(v.size())}, id)),
                  "h.ps.sum")) {
    size_t bad = 0;
    for (size_t i = 0; i < v.size(); ++i) bad += v[i] != float(sum_of_values(4, i));
    k.expect(bad == 0, "h.ps.sum: " + std::to_string(bad) + " wrong elements");
  }
  gathers(k, id, {0, 1, 2, 3});
}

void run_placement(const Placement& p, Switch setting) {
  const bool expected = setting == Switch::kOn ? p.forced : setting == Switch::kAuto && p.automatic;
  std::fprintf(stderr, "  %s, HOROVOD_HIERARCHICAL_*=%s: %s\n", p.name, hs::Config::switch_name(setting),
               expected ? "two levels" : "flat");
  hs::Config cfg = test_config();
  cfg.hierarchical_allreduce = cfg.hierarchical_allgather = setting;
  std::vector<std::vector<float>> results(p.hosts.size());
  Job(p.hosts, cfg).run([&](Rank& k) {
    k.expect(k.engine().hierarchical(0, OpType::kAllreduce) == expected, "allreduce: wrong algorithm chosen");
    k.expect(k.engine().hierarchical(0, OpType::kAllgather) == expected, "allgather: wrong algorithm chosen");
    const auto& s = k.engine().stats();
    const int64_t ar = s.hierarchical_allreduces.load(), ag = s.hierarchical_allgathers.load();
    reductions(k);
    fused(k);
    std::vector<int> everyone(p.hosts.size());
    for (size_t q = 0; q < everyone.size(); ++q) everyone[q] = int(q);
    gathers(k, 0, everyone);
    same_bits(k, results);
    k.expect((s.hierarchical_allreduces.load() > ar) == expected, "allreduce: two levels ran where they should not");
    k.expect((s.hierarchical_allgathers.load() > ag) == expected, "allgather: two levels ran where they should not");
    if (p.hosts.size() > 4) process_set(k, p, setting);
  });
}

}  // namespace

void scenario_hierarchical() {
  for (const Placement& p : placements())
    for (Switch setting : {Switch::kAuto, Switch::kOn}) run_placement(p, setting);
  run_placement(placements()[0], Switch::kOff);
  // One rank per host: nothing to gain, flat even when switched on.
  hs::Config on = test_config();
  on.hierarchical_allreduce = Switch::kOn;
  Job({"a", "b", "c"}, on).run([](Rank& k) {
    k.expect(!k.engine().hierarchical(0, OpType::kAllreduce), "one rank per host: two levels chosen");
  });
}

}  // namespace hs_test
