// Checks every collective over the in-process ThreadGroup (thread_group.h): each collective x
// dtype x size x group size against a reference computed in double (exact for integers, within
// a rounding bound for floats), plus the guarantees the engine relies on: bit-identical results
// on every rank, in-place == out-of-place, reducescatter == the matching allreduce slice, bad
// arguments throw CollectiveError on every rank, and a barrier cannot be passed early.
// Exit status 0 when everything passes; failures are printed with their case.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "common/errors.h"
#include "common/half.h"
#include "thread_group.h"

namespace {

using hs::DataType;
using hs::ReduceOp;
using Bytes = std::vector<char>;

const DataType kTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kUInt16,  DataType::kInt16,
                           DataType::kInt32,   DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                           DataType::kFloat32, DataType::kFloat64, DataType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
// 0, 1, odd, exactly the direct/ring switch for 4-byte types and just above it, large.
const size_t kCounts[] = {0, 1, 7, 16384, 16385, 300000};
const int kSizes[] = {1, 2, 3, 4, 5};

int g_failures = 0;
long g_checks = 0;

void fail(const std::string& what) {
  if (++g_failures <= 40) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

bool expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) fail(what);
  return ok;
}

std::string describe(int n, DataType dt, size_t count) {
  return "n=" + std::to_string(n) + " " + hs::dtype_name(dt) + " count=" + std::to_string(count);
}

// ---- running ranks --------------------------------------------------------------------------

struct Outcome {
  bool collective_error = false;
  std::string error;  // empty: returned normally
};

// Runs fn on n threads, one ThreadGroup per rank, and reports how each rank finished.
std::vector<Outcome> run_ranks(int n, const std::function<void(hs::Group&)>& fn) {
  hs_test::World world(n);
  std::vector<Outcome> out(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      hs_test::ThreadGroup g(world, r);
      try {
        fn(g);
      } catch (const hs::CollectiveError& e) {
        out[size_t(r)] = {true, e.what()};
      } catch (const std::exception& e) {
        out[size_t(r)] = {false, e.what()};
        world.fail(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Runs fn and records a failure if any rank threw; returns whether all succeeded.
bool run_ok(int n, const std::string& what, const std::function<void(hs::Group&)>& fn) {
  const auto outcomes = run_ranks(n, fn);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (!outcomes[r].error.empty()) {
      fail(what + ": rank " + std::to_string(r) + " threw: " + outcomes[r].error);
      return false;
    }
  }
  ++g_checks;
  return true;
}

// ---- element access and test data ------------------------------------------------------------

double get(const Bytes& b, DataType dt, size_t i) {
  const char* p = b.data() + i * hs::dtype_size(dt);
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (dt) {
    case DataType::kUInt8: return load(uint8_t());
    case DataType::kInt8: return load(int8_t());
    case DataType::kInt16: return load(int16_t());
    case DataType::kUInt16: return load(uint16_t());
    case DataType::kInt32: return load(int32_t());
    case DataType::kInt64: return double(load(int64_t()));
    case DataType::kFloat16: return hs::half_to_float(load(uint16_t()));
    case DataType::kBFloat16: return hs::bfloat16_to_float(load(uint16_t()));
    case DataType::kFloat32: return load(float());
    case DataType::kFloat64: return load(double());
    case DataType::kBool: return load(uint8_t());
  }
  return 0;
}

void put(Bytes& b, DataType dt, size_t i, double v) {
  char* p = b.data() + i * hs::dtype_size(dt);
  auto store = [p](auto x) { std::memcpy(p, &x, sizeof x); };
  switch (dt) {
    case DataType::kUInt8: return store(uint8_t(v));
    case DataType::kInt8: return store(int8_t(v));
    case DataType::kInt16: return store(int16_t(v));
    case DataType::kUInt16: return store(uint16_t(v));
    case DataType::kInt32: return store(int32_t(v));
    case DataType::kInt64: return store(int64_t(v));
    case DataType::kFloat16: return store(hs::float_to_half(float(v)));
    case DataType::kBFloat16: return store(hs::float_to_bfloat16(float(v)));
    case DataType::kFloat32: return store(float(v));
    case DataType::kFloat64: return store(v);
    case DataType::kBool: return store(uint8_t(v != 0));
  }
}

uint64_t mix(uint64_t x) {  // splitmix64 finaliser: cheap, well-spread test data
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double uniform(uint64_t a, uint64_t b, uint64_t c) {
  return double(mix(a * 0x100000001b3ull ^ mix(b * 31 + c)) >> 11) * 0x1.0p-53;
}

// Values chosen so that the double reference is exact for integers (no overflow for up to 5
// ranks) and floats stay well inside every type's range.
double make_value(DataType dt, ReduceOp op, int rank, size_t i) {
  const double u = uniform(uint64_t(rank) + 1, i, uint64_t(dt) * 8 + uint64_t(op));
  const bool sum = op == ReduceOp::kSum, prod = op == ReduceOp::kProduct;
  switch (dt) {
    case DataType::kBool: return u < 0.5 ? 0 : 1;
    case DataType::kUInt8: return sum ? std::floor(u * 41) : prod ? 1 + std::floor(u * 3) : std::floor(u * 256);
    case DataType::kInt8:
      if (prod) return std::floor(u * 4) - 2 + (u >= 0.5 ? 1 : 0);  // -2, -1, 1, 2
      return sum ? std::floor(u * 41) - 20 : std::floor(u * 256) - 128;
    case DataType::kInt16:
      if (prod) return std::floor(u * 4) - 2 + (u >= 0.5 ? 1 : 0);  // -2, -1, 1, 2
      return sum ? std::floor(u * 12001) - 6000 : std::floor(u * 65536) - 32768;
    case DataType::kUInt16: return sum ? std::floor(u * 12001) : prod ? 1 + std::floor(u * 3) : std::floor(u * 65536);
    case DataType::kInt32:
      return sum    ? std::floor(u * 2e8) - 1e8
             : prod ? std::floor(u * 101) - 50
                    : std::floor(u * 4294967296.0) - 2147483648.0;
    case DataType::kInt64:
      return sum ? std::floor(u * 2e15) - 1e15 : prod ? std::floor(u * 2001) - 1000 : std::floor(u * 0x1p53) - 0x1p52;
    default:  // floating point
      if (prod) return (0.5 + 1.5 * u) * (mix(i + uint64_t(rank)) & 1 ? -1 : 1);
      return 2 * u - 1;
  }
}

Bytes make_input(DataType dt, ReduceOp op, int rank, size_t count) {
  Bytes b(count * hs::dtype_size(dt));
  for (size_t i = 0; i < count; ++i) put(b, dt, i, make_value(dt, op, rank, i));
  return b;
}

Bytes pattern(size_t bytes, uint64_t salt) {
  Bytes b(bytes);
  for (size_t i = 0; i < bytes; ++i) b[i] = char(mix(salt * 1000003 + i));
  return b;
}

// ---- reference reduction --------------------------------------------------------------------

double fold(DataType dt, ReduceOp op, double acc, double x) {
  if (dt == DataType::kBool) {
    const bool a = acc != 0, b = x != 0;
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (a || b) : (a && b);
  }
  switch (op) {
    case ReduceOp::kSum: return acc + x;
    case ReduceOp::kProduct: return acc * x;
    case ReduceOp::kMin: return std::isnan(acc) || std::isnan(x) ? NAN : std::min(acc, x);
    default: return std::isnan(acc) || std::isnan(x) ? NAN : std::max(acc, x);
  }
}

double unit_roundoff(DataType dt) {
  switch (dt) {
    case DataType::kFloat16: return 0x1p-11;
    case DataType::kBFloat16: return 0x1p-8;
    case DataType::kFloat32: return 0x1p-24;
    case DataType::kFloat64: return 0x1p-53;
    default: return 0;
  }
}

// Every intermediate result is rounded once, so n roundings of at most u * (sum of |x|) bound a
// sum; products are bounded relatively. Min/Max and integers must be exact.
bool close_enough(DataType dt, ReduceOp op, int n, double got, double ref, double magnitude) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got);
  if (!hs::dtype_is_float(dt) || op == ReduceOp::kMin || op == ReduceOp::kMax) return got == ref;
  const double u = unit_roundoff(dt);
  const double bound = op == ReduceOp::kSum ? n * u * magnitude : 2 * n * u * std::fabs(ref);
  return std::fabs(got - ref) <= bound + n * 0x1p-24;
}

struct Reference {
  std::vector<double> value, magnitude;
};

Reference reference(const std::vector<Bytes>& in, DataType dt, ReduceOp op, size_t count) {
  Reference ref{std::vector<double>(count), std::vector<double>(count)};
  for (size_t i = 0; i < count; ++i) {
    double acc = get(in[0], dt, i), mag = std::fabs(acc);
    for (size_t r = 1; r < in.size(); ++r) {
      const double x = get(in[r], dt, i);
      acc = fold(dt, op, acc, x);
      mag += std::fabs(x);
    }
    ref.value[i] = acc;
    ref.magnitude[i] = mag;
  }
  return ref;
}

// Compares `got` (elements [first, first+len) of the full result) with the reference.
void check_against(const Bytes& got, const Reference& ref, DataType dt, ReduceOp op, int n, size_t first, size_t len,
                   const std::string& what) {
  for (size_t i = 0; i < len; ++i) {
    const double g = get(got, dt, i);
    if (!close_enough(dt, op, n, g, ref.value[first + i], ref.magnitude[first + i])) {
      expect(false, what + ": element " + std::to_string(first + i) + " is " + std::to_string(g) + ", reference " +
                        std::to_string(ref.value[first + i]));
      return;
    }
  }
  ++g_checks;
}

bool same_bytes(const char* a, const char* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

// ---- allreduce and reducescatter -----------------------------------------------------------

std::vector<size_t> even_counts(size_t count, int n) {
  std::vector<size_t> c(size_t(n), count / size_t(n));
  for (size_t r = 0; r < count % size_t(n); ++r) ++c[r];
  return c;
}

// Block layouts reducescatter must handle: the even split (what 1-D tensors get), a split by
// rows of 3 (what a [count/3, 3] tensor gets), and one with empty blocks.
std::vector<std::vector<size_t>> block_layouts(size_t count, int n) {
  std::vector<std::vector<size_t>> layouts{even_counts(count, n)};
  if (count % 3 == 0 && count > 0) {
    auto rows = even_counts(count / 3, n);
    for (auto& c : rows) c *= 3;
    layouts.push_back(rows);
  }
  std::vector<size_t> skewed(size_t(n), 0);
  std::vector<int> holders;
  for (int r = 0; r < n; r += 2) holders.push_back(r);
  const auto share = even_counts(count, int(holders.size()));
  for (size_t k = 0; k < holders.size(); ++k) skewed[size_t(holders[k])] = share[holders.size() - 1 - k];
  layouts.push_back(skewed);
  return layouts;
}

void test_reductions(int n, DataType dt, ReduceOp op, size_t count) {
  const std::string what = std::string("allreduce ") + hs::reduce_op_name(op) + " " + describe(n, dt, count);
  const size_t es = hs::dtype_size(dt), bytes = count * es;
  std::vector<Bytes> in, out;
  for (int r = 0; r < n; ++r) {
    in.push_back(make_input(dt, op, r, count));
    out.emplace_back(bytes, char(0x5a));
  }
  const Reference ref = reference(in, dt, op, count);

  if (!run_ok(n, what, [&](hs::Group& g) {
        hs::allreduce(g, in[size_t(g.rank())].data(), out[size_t(g.rank())].data(), count, dt, op);
      })) {
    return;
  }
  check_against(out[0], ref, dt, op, n, 0, count, what);
  for (int r = 1; r < n; ++r) {
    expect(same_bytes(out[size_t(r)].data(), out[0].data(), bytes),
           what + ": rank " + std::to_string(r) + " differs bitwise from rank 0");
  }

  std::vector<Bytes> inplace = in;
  if (run_ok(n, what + " in-place", [&](hs::Group& g) {
        char* p = inplace[size_t(g.rank())].data();
        hs::allreduce(g, p, p, count, dt, op);
      })) {
    for (int r = 0; r < n; ++r) {
      expect(same_bytes(inplace[size_t(r)].data(), out[0].data(), bytes),
             what + ": in-place result on rank " + std::to_string(r) + " differs from out-of-place");
    }
  }

  // A postscale is folded into the last reduction step: the bits must equal a separate pass of
  // scale_buffer over the result (Average is Sum with postscale 1/n).
  if (dt != DataType::kBool) {
    const double factor = hs::dtype_is_float(dt) ? 0.37 : 0.5;
    Bytes expected = out[0];
    hs::scale_buffer(expected.data(), count, dt, factor);
    std::vector<Bytes> scaled;
    for (int r = 0; r < n; ++r) scaled.emplace_back(bytes, char(0x5a));
    if (run_ok(n, what + " postscale", [&](hs::Group& g) {
          const size_t r = size_t(g.rank());
          hs::allreduce(g, in[r].data(), scaled[r].data(), count, dt, op, factor);
        })) {
      for (int r = 0; r < n; ++r)
        expect(same_bytes(scaled[size_t(r)].data(), expected.data(), bytes),
               what + ": postscaled result on rank " + std::to_string(r) + " differs from a separate scale");
    }
  }

  for (const auto& counts : block_layouts(count, n)) {
    std::string layout;
    for (size_t c : counts) layout += std::to_string(c) + ",";
    const std::string rs =
        std::string("reducescatter ") + hs::reduce_op_name(op) + " " + describe(n, dt, count) + " counts=" + layout;
    std::vector<size_t> offset(size_t(n), 0);
    for (int r = 1; r < n; ++r) offset[size_t(r)] = offset[size_t(r) - 1] + counts[size_t(r) - 1];
    std::vector<Bytes> block;
    for (int r = 0; r < n; ++r) block.emplace_back(counts[size_t(r)] * es, char(0x5a));
    if (!run_ok(n, rs, [&](hs::Group& g) {
          const size_t r = size_t(g.rank());
          hs::reducescatter(g, in[r].data(), block[r].data(), counts, dt, op);
        })) {
      continue;
    }
    for (int r = 0; r < n; ++r) {
      expect(same_bytes(block[size_t(r)].data(), out[0].data() + offset[size_t(r)] * es, counts[size_t(r)] * es),
             rs + ": block of rank " + std::to_string(r) + " differs bitwise from allreduce");
    }
    // Output placed inside the input, at the rank's own block (an in-place reducescatter).
    std::vector<Bytes> work = in;
    if (run_ok(n, rs + " in-place", [&](hs::Group& g) {
          const size_t r = size_t(g.rank());
          hs::reducescatter(g, work[r].data(), work[r].data() + offset[r] * es, counts, dt, op);
        })) {
      for (int r = 0; r < n; ++r) {
        expect(same_bytes(work[size_t(r)].data() + offset[size_t(r)] * es, out[0].data() + offset[size_t(r)] * es,
                          counts[size_t(r)] * es),
               rs + ": in-place block of rank " + std::to_string(r) + " differs");
      }
    }
  }
}

// ---- data movement collectives -------------------------------------------------------------

void test_allgatherv(int n, DataType dt, size_t count) {
  const std::string what = "allgatherv " + describe(n, dt, count);
  const size_t es = hs::dtype_size(dt);
  std::vector<size_t> bytes(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) bytes[size_t(r)] = (r % 3 == 1 || count <= size_t(r)) ? 0 : (count - size_t(r)) * es;
  std::vector<Bytes> in;
  Bytes expected;
  std::vector<size_t> offset;
  for (int r = 0; r < n; ++r) {
    in.push_back(pattern(bytes[size_t(r)], uint64_t(r) + 7 * count));
    offset.push_back(expected.size());
    expected.insert(expected.end(), in.back().begin(), in.back().end());
  }
  for (int in_place = 0; in_place < 2; ++in_place) {
    std::vector<Bytes> out(size_t(n), Bytes(expected.size(), char(0x5a)));
    if (in_place) {
      for (int r = 0; r < n; ++r)
        std::copy(in[size_t(r)].begin(), in[size_t(r)].end(), out[size_t(r)].begin() + long(offset[size_t(r)]));
    }
    const std::string w = what + (in_place ? " in-place" : "");
    if (!run_ok(n, w, [&](hs::Group& g) {
          const size_t r = size_t(g.rank());
          const void* src = in_place ? static_cast<const void*>(out[r].data() + offset[r]) : in[r].data();
          hs::allgatherv(g, src, out[r].data(), bytes);
        })) {
      continue;
    }
    for (int r = 0; r < n; ++r) {
      expect(out[size_t(r)] == expected, w + ": wrong result on rank " + std::to_string(r));
    }
  }
}

void test_broadcast(int n, DataType dt, size_t count) {
  const size_t bytes = count * hs::dtype_size(dt);
  for (int root : std::set<int>{0, n / 2, n - 1}) {
    const std::string what = "broadcast root=" + std::to_string(root) + " " + describe(n, dt, count);
    const Bytes data = pattern(bytes, uint64_t(root) * 13 + count);
    std::vector<Bytes> buf(size_t(n), Bytes(bytes, char(0x5a)));
    buf[size_t(root)] = data;
    if (!run_ok(n, what, [&](hs::Group& g) { hs::broadcast(g, buf[size_t(g.rank())].data(), bytes, root); })) {
      continue;
    }
    for (int r = 0; r < n; ++r) expect(buf[size_t(r)] == data, what + ": wrong result on rank " + std::to_string(r));
  }
}

void test_alltoallv(int n, DataType dt, size_t count) {
  const std::string what = "alltoallv " + describe(n, dt, count);
  const size_t es = hs::dtype_size(dt);
  // Piece from rank s to rank d: a size that varies per pair and is often 0.
  auto piece = [&](int s, int d) { return ((count * size_t(s + 2 * d + 1) + size_t(s)) % (count + 1)) * es; };
  const size_t ranks = static_cast<size_t>(n);
  std::vector<Bytes> in(ranks), out(ranks), expected(ranks);
  std::vector<std::vector<size_t>> send(ranks), recv(ranks);
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      const Bytes p = pattern(piece(s, d), uint64_t(s * 100 + d) + count);
      in[size_t(s)].insert(in[size_t(s)].end(), p.begin(), p.end());
      expected[size_t(d)].insert(expected[size_t(d)].end(), p.begin(), p.end());
      send[size_t(s)].push_back(piece(s, d));
      recv[size_t(d)].push_back(piece(s, d));
    }
  }
  for (int r = 0; r < n; ++r) out[size_t(r)].assign(expected[size_t(r)].size(), char(0x5a));
  if (!run_ok(n, what, [&](hs::Group& g) {
        const size_t r = size_t(g.rank());
        hs::alltoallv(g, in[r].data(), send[r], out[r].data(), recv[r]);
      })) {
    return;
  }
  for (int r = 0; r < n; ++r)
    expect(out[size_t(r)] == expected[size_t(r)], what + ": wrong result on rank " + std::to_string(r));
}

void test_barrier(int n) {
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> entered{0}, early{0};
    run_ok(n, "barrier n=" + std::to_string(n), [&](hs::Group& g) {
      // Stagger arrivals so that a barrier that does not wait for everyone is caught.
      std::this_thread::sleep_for(std::chrono::milliseconds((g.rank() * 7 + round * 3) % 11));
      entered.fetch_add(1);
      hs::barrier(g);
      if (entered.load() != g.size()) early.fetch_add(1);
    });
    expect(early.load() == 0, "barrier n=" + std::to_string(n) + ": a rank left before all entered");
  }
}

// ---- special cases ---------------------------------------------------------------------------

void expect_collective_error(int n, const std::string& what, const std::function<void(hs::Group&)>& fn) {
  const auto outcomes = run_ranks(n, fn);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    expect(outcomes[r].collective_error, what + ": rank " + std::to_string(r) + " should throw CollectiveError, got: " +
                                             (outcomes[r].error.empty() ? "no error" : outcomes[r].error));
  }
}

void test_bad_arguments() {
  const int n = 3;
  char buf[64] = {};
  char out[256] = {};
  for (int root : {-1, 3, 100}) {
    expect_collective_error(n, "broadcast root " + std::to_string(root),
                            [&](hs::Group& g) { hs::broadcast(g, buf, 8, root); });
  }
  for (ReduceOp op : {ReduceOp::kAverage, ReduceOp::kAdasum, ReduceOp(42)}) {
    expect_collective_error(n, std::string("allreduce op ") + hs::reduce_op_name(op), [&](hs::Group& g) {
      char local[8] = {};
      hs::allreduce(g, local, local, 2, DataType::kFloat32, op);
    });
    expect_collective_error(n, std::string("reducescatter op ") + hs::reduce_op_name(op), [&](hs::Group& g) {
      char local[12] = {};
      hs::reducescatter(g, local, local, {1, 1, 1}, DataType::kFloat32, op);
    });
  }
  expect_collective_error(n, "allreduce dtype 99", [&](hs::Group& g) {
    char local[8] = {};
    hs::allreduce(g, local, local, 2, DataType(99), ReduceOp::kSum);
  });
  expect_collective_error(n, "allgatherv sizes", [&](hs::Group& g) { hs::allgatherv(g, buf, out, {1, 1}); });
  expect_collective_error(n, "reducescatter counts", [&](hs::Group& g) {
    char local[8] = {};
    hs::reducescatter(g, buf, local, {1, 1, 1, 1}, DataType::kFloat32, ReduceOp::kSum);
  });
  expect_collective_error(n, "alltoallv sizes", [&](hs::Group& g) { hs::alltoallv(g, buf, {1, 1, 1}, out, {1, 1}); });
  expect_collective_error(n, "alltoallv self", [&](hs::Group& g) {
    std::vector<size_t> recv{1, 1, 1};
    recv[size_t(g.rank())] = 2;
    hs::alltoallv(g, buf, {1, 1, 1}, out, recv);
  });
  expect_collective_error(n, "allreduce null",
                          [&](hs::Group& g) { hs::allreduce(g, nullptr, out, 4, DataType::kInt32, ReduceOp::kSum); });
}

// Min/Max must propagate a NaN from any rank, on both the direct and the ring path.
void test_nan_propagation() {
  const int n = 3;
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      for (size_t count : {size_t(7), size_t(300000)}) {
        const std::string what = std::string("NaN ") + hs::reduce_op_name(op) + " " + describe(n, dt, count);
        std::vector<Bytes> in, out;
        for (int r = 0; r < n; ++r) {
          in.push_back(make_input(dt, op, r, count));
          out.emplace_back(in.back().size());
        }
        put(in[1], dt, 2, NAN);
        put(in[2], dt, 5, NAN);
        put(in[0], dt, count - 1, NAN);
        if (!run_ok(n, what, [&](hs::Group& g) {
              const size_t r = size_t(g.rank());
              hs::allreduce(g, in[r].data(), out[r].data(), count, dt, op);
            })) {
          continue;
        }
        for (int r = 0; r < n; ++r) {
          const Bytes& o = out[size_t(r)];
          expect(std::isnan(get(o, dt, 2)) && std::isnan(get(o, dt, 5)) && std::isnan(get(o, dt, count - 1)) &&
                     !std::isnan(get(o, dt, 0)),
                 what + ": NaN not propagated on rank " + std::to_string(r));
        }
      }
    }
  }
}

// Two ranks reduce each other's buffer as it arrives; the operands must go in the same order on
// both. Min and Max of -0.0 and +0.0 return whichever operand comes first, so another order would
// leave the ranks' parameters with different bits.
void test_two_rank_operand_order() {
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kSum}) {
    const std::string what = std::string("operand order ") + hs::reduce_op_name(op) + " n=2";
    const size_t count = 33;
    std::vector<std::vector<float>> in(2, std::vector<float>(count, 1.5f)), out(2, std::vector<float>(count));
    for (size_t i = 0; i < count; i += 2) {
      in[0][i] = i % 4 ? -0.0f : 0.0f;
      in[1][i] = i % 4 ? 0.0f : -0.0f;
    }
    in[1][count - 2] = NAN;
    for (bool in_place : {false, true}) {
      auto work = in;
      if (!run_ok(2, what, [&](hs::Group& g) {
            const size_t r = size_t(g.rank());
            float* dst = in_place ? work[r].data() : out[r].data();
            hs::allreduce(g, work[r].data(), dst, count, DataType::kFloat32, op);
            if (in_place) out[r] = work[r];
          })) {
        continue;
      }
      const std::string how = what + (in_place ? " in place" : "");
      expect(std::isnan(out[0][count - 2]) && std::isnan(out[1][count - 2]), how + ": NaN lost");
      out[0][count - 2] = out[1][count - 2] = 0.0f;  // (a NaN's payload may differ; that is fine)
      expect(same_bytes(reinterpret_cast<const char*>(out[0].data()), reinterpret_cast<const char*>(out[1].data()),
                        count * 4),
             how + ": the ranks' results differ bitwise");
    }
  }
}

// Many collectives back to back without barriers, so messages of consecutive calls queue up on
// the same pairs: a collective whose sends and receives do not pair up exactly would consume a
// neighbour's message and fail here.
void test_back_to_back() {
  const int n = 4;
  const std::string what = "back-to-back sequence n=4";
  std::atomic<int> wrong{0};
  run_ok(n, what, [&](hs::Group& g) {
    const int r = g.rank();
    for (int it = 0; it < 24; ++it) {
      const size_t count = (it % 3 == 0) ? 50000 : size_t(it * 5 + 1);
      std::vector<int32_t> x(count), y(count);
      for (size_t i = 0; i < count; ++i) x[i] = int32_t(i % 1000) + r * it;
      switch (it % 5) {
        case 0: {
          hs::allreduce(g, x.data(), y.data(), count, DataType::kInt32, ReduceOp::kSum);
          for (size_t i = 0; i < count; ++i) wrong += y[i] != int32_t(4 * (i % 1000)) + 6 * it;
          break;
        }
        case 1: {
          if (r != it % n) std::fill(x.begin(), x.end(), -1);
          hs::broadcast(g, x.data(), count * 4, it % n);
          for (size_t i = 0; i < count; ++i) wrong += x[i] != int32_t(i % 1000) + (it % n) * it;
          break;
        }
        case 2: {
          std::vector<int32_t> all(count * size_t(n));
          hs::allgatherv(g, x.data(), all.data(), std::vector<size_t>(size_t(n), count * 4));
          for (size_t i = 0; i < all.size(); ++i)
            wrong += all[i] != int32_t((i % count) % 1000) + int32_t(i / count) * it;
          break;
        }
        case 3: {
          std::vector<int32_t> got(static_cast<size_t>(n));
          std::vector<int32_t> mine(size_t(n), r * 10 + it);
          hs::alltoallv(g, mine.data(), std::vector<size_t>(size_t(n), 4), got.data(),
                        std::vector<size_t>(size_t(n), 4));
          for (int p = 0; p < n; ++p) wrong += got[size_t(p)] != p * 10 + it;
          break;
        }
        default: {
          const auto counts = even_counts(count, n);
          size_t off = 0;
          for (int p = 0; p < r; ++p) off += counts[size_t(p)];
          hs::reducescatter(g, x.data(), y.data(), counts, DataType::kInt32, ReduceOp::kMax);
          for (size_t i = 0; i < counts[size_t(r)]; ++i) wrong += y[i] != int32_t((off + i) % 1000) + 3 * it;
          break;
        }
      }
    }
    hs::barrier(g);
  });
  expect(wrong.load() == 0, what + ": " + std::to_string(wrong.load()) + " wrong elements");
}

}  // namespace

int main(int argc, char** argv) {
  // --quick (for sanitizer builds, 5-20x slower): every algorithm still runs, with fewer dtypes
  // where the data is large: counts at the direct/ring switch with one dtype per element size, the
  // largest count (multi-chunk, bidirectional ring) with float32 only.
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  auto skipped = [quick](DataType dt, size_t count) {
    if (!quick || count < 16384) return false;
    if (count == 300000) return dt != DataType::kFloat32;
    return dt != DataType::kUInt8 && dt != DataType::kFloat16 && dt != DataType::kFloat32 && dt != DataType::kFloat64;
  };
  const auto start = std::chrono::steady_clock::now();
  for (int n : kSizes) {
    for (DataType dt : kTypes) {
      for (size_t count : kCounts) {
        if (skipped(dt, count)) continue;
        for (ReduceOp op : kOps) test_reductions(n, dt, op, count);
        test_allgatherv(n, dt, count);
        test_broadcast(n, dt, count);
        test_alltoallv(n, dt, count);
      }
    }
    test_barrier(n);
  }
  test_bad_arguments();
  test_nan_propagation();
  test_two_rank_operand_order();
  test_back_to_back();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%ld checks, %d failures, %.1f s\n", g_checks, g_failures, secs);
  return g_failures == 0 ? 0 : 1;
}
