// Checks adasum_allreduce over the in-process ThreadGroup (thread_group.h) for 1 to 9 ranks:
// against Adasum computed here from its definition (a tree over rank order, pairs combined as
// (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b, tensor by tensor), bit-identical results on every rank,
// Adasum's defining cases (orthogonal vectors add up, equal ones stay, a zero vector changes
// nothing), and a CollectiveError on every rank for a non-floating-point dtype.
// Exit status 0 when everything passes; failures are printed with their case.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "common/errors.h"
#include "common/half.h"
#include "thread_group.h"

namespace {

using hs::DataType;

int g_failures = 0;
long g_checks = 0;

bool expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok && ++g_failures <= 40) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  return ok;
}

// Runs fn(group, rank) on n threads; returns, per rank, the CollectiveError text ("" if none).
std::vector<std::string> run_ranks(int n, const std::function<void(hs::Group&, int)>& fn) {
  hs_test::World world(n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      hs_test::ThreadGroup g(world, r);
      try {
        fn(g, r);
      } catch (const hs::CollectiveError& e) {
        errors[size_t(r)] = e.what();
      } catch (const std::exception& e) {
        errors[size_t(r)] = std::string("unexpected: ") + e.what();
        world.fail(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Values are kept as doubles here and stored in / read from the dtype's bytes.
size_t width(DataType dt) { return hs::dtype_size(dt); }

double load(const std::vector<char>& b, DataType dt, size_t i) {
  const char* p = b.data() + i * width(dt);
  if (dt == DataType::kFloat64) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  if (dt == DataType::kFloat32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dt == DataType::kFloat16 ? hs::half_to_float(h) : hs::bfloat16_to_float(h);
}

void store(std::vector<char>& b, DataType dt, size_t i, double v) {
  char* p = b.data() + i * width(dt);
  if (dt == DataType::kFloat64) {
    std::memcpy(p, &v, 8);
    return;
  }
  float f = static_cast<float>(v);
  if (dt == DataType::kFloat32) {
    std::memcpy(p, &f, 4);
    return;
  }
  uint16_t h = dt == DataType::kFloat16 ? hs::float_to_half(f) : hs::float_to_bfloat16(f);
  std::memcpy(p, &h, 2);
}

// The definition, tensor by tensor: a and b combined into a, rounded to the dtype.
void adasum_pair(std::vector<char>& a, const std::vector<char>& b, const std::vector<size_t>& counts, DataType dt) {
  size_t at = 0;
  for (size_t c : counts) {
    double dot = 0, aa = 0, bb = 0;
    for (size_t i = at; i < at + c; ++i) {
      double x = load(a, dt, i), y = load(b, dt, i);
      dot += x * y;
      aa += x * x;
      bb += y * y;
    }
    double ca = aa > 0 ? 1 - dot / (2 * aa) : 1, cb = bb > 0 ? 1 - dot / (2 * bb) : 1;
    for (size_t i = at; i < at + c; ++i) store(a, dt, i, ca * load(a, dt, i) + cb * load(b, dt, i));
    at += c;
  }
}

// Neighbours paired level by level; an unpaired last one moves up as it is.
std::vector<char> reference(std::vector<std::vector<char>> level, const std::vector<size_t>& counts, DataType dt) {
  while (level.size() > 1) {
    std::vector<std::vector<char>> next;
    for (size_t i = 0; i < level.size(); i += 2) {
      if (i + 1 < level.size()) adasum_pair(level[i], level[i + 1], counts, dt);
      next.push_back(level[i]);
    }
    level = next;
  }
  return level[0];
}

double tolerance(DataType dt) {
  switch (dt) {
    case DataType::kFloat64: return 1e-12;
    case DataType::kFloat32: return 1e-5;
    default: return 2e-2;
  }
}

void test_against_definition(int n, DataType dt, const std::vector<size_t>& counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::vector<std::vector<char>> inputs(size_t(n), std::vector<char>(total * width(dt)));
  for (int r = 0; r < n; ++r) {
    std::mt19937 gen(1000u * unsigned(r) + unsigned(total));
    std::normal_distribution<double> normal(0.0, 1.0 + r);
    for (size_t i = 0; i < total; ++i) store(inputs[size_t(r)], dt, i, normal(gen));
  }
  std::vector<std::vector<char>> bufs = inputs;
  std::string what = "n=" + std::to_string(n) + " " + hs::dtype_name(dt) + " total=" + std::to_string(total) +
                     " tensors=" + std::to_string(counts.size());
  auto errors = run_ranks(n, [&](hs::Group& g, int r) { hs::adasum_allreduce(g, bufs[size_t(r)].data(), counts, dt); });
  for (int r = 0; r < n; ++r)
    expect(errors[size_t(r)].empty(), what + ": rank " + std::to_string(r) + " threw " + errors[size_t(r)]);
  for (int r = 1; r < n; ++r) expect(bufs[size_t(r)] == bufs[0], what + ": rank " + std::to_string(r) + " differs");
  std::vector<char> want = reference(inputs, counts, dt);
  size_t bad = 0;
  for (size_t i = 0; i < total; ++i) {
    double got = load(bufs[0], dt, i), exp = load(want, dt, i);
    if (!(std::fabs(got - exp) <= tolerance(dt) * (1 + std::fabs(exp)))) ++bad;
  }
  expect(bad == 0, what + ": " + std::to_string(bad) + " elements differ from the definition");
}

void test_defining_cases(int n) {
  const std::string what = "n=" + std::to_string(n);
  // one-hot vectors are orthogonal: they add up
  std::vector<std::vector<double>> bufs(size_t(n), std::vector<double>(size_t(n), 0.0));
  for (int r = 0; r < n; ++r) bufs[size_t(r)][size_t(r)] = 1.0;
  run_ranks(n, [&](hs::Group& g, int r) {
    hs::adasum_allreduce(g, bufs[size_t(r)].data(), {size_t(n)}, DataType::kFloat64);
  });
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < n; ++i) expect(bufs[size_t(r)][size_t(i)] == 1.0, what + ": orthogonal vectors must add up");
  // equal vectors stay as they are; a rank with a zero vector changes nothing
  std::vector<std::vector<double>> same(size_t(n), std::vector<double>{3.0, -1.0, 0.5});
  if (n > 1) same[1] = {0.0, 0.0, 0.0};
  run_ranks(n, [&](hs::Group& g, int r) { hs::adasum_allreduce(g, same[size_t(r)].data(), {3}, DataType::kFloat64); });
  for (int r = 0; r < n; ++r)
    expect(same[size_t(r)] == std::vector<double>({3.0, -1.0, 0.5}), what + ": equal vectors must stay");
  // integers are refused on every rank
  std::vector<std::vector<int32_t>> ints(size_t(n), std::vector<int32_t>(4, 1));
  auto errors = run_ranks(
      n, [&](hs::Group& g, int r) { hs::adasum_allreduce(g, ints[size_t(r)].data(), {4}, DataType::kInt32); });
  for (int r = 0; r < n; ++r)
    expect(errors[size_t(r)].find("floating-point") != std::string::npos, what + ": int32 must be refused");
}

}  // namespace

int main() {
  const std::vector<std::vector<size_t>> layouts = {{1}, {7}, {5, 0, 17, 1}, {40000}, {0}};
  for (int n = 1; n <= 9; ++n) {
    for (DataType dt : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64})
      for (const auto& counts : layouts) test_against_definition(n, dt, counts);
    test_defining_cases(n);
  }
  std::printf("%ld checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
