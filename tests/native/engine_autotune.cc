// Autotune through the whole engine (engine/autotune.h): ranks keep exact results while rank 0
// changes the fusion threshold and turns the response cache off and on again, every rank ends with
// rank 0's choice, and the log has a row per trial and a final one.
#include <algorithm>
#include <fstream>

#include "engine_ranks.h"
#include "engine_scenarios.h"

namespace hs_test {

namespace {

using hs::DataType;
using hs::OpType;

hs::TensorRequest sum_of(const std::string& name, std::vector<float>& v) {
  return Rank::request(OpType::kAllreduce, name, v.data(), v.data(), DataType::kFloat32, {int64_t(v.size())});
}

// Steps of 12 small tensors and 2 large ones until no rank is searching, then a few more; a small
// blocking allreduce of the flag each step also takes the speculative path (scored on rank 0).
void train_until_tuned(Rank& k, std::vector<hs::TuningState>* finals) {
  const int n = k.size(), r = k.rank();
  const float want = float(n * (n + 1) / 2);
  std::vector<std::vector<float>> t;
  for (int i = 0; i < 14; ++i) t.emplace_back(i < 12 ? 256 : 70000, 0.0f);
  int step = 0, after = 0, settings_seen = 0;
  hs::TuningPoint last{};
  while (after < 5 && step < 5000) {
    for (auto& v : t) std::fill(v.begin(), v.end(), float(r + 1));
    std::vector<int64_t> handles;
    for (size_t i = 0; i < t.size(); ++i) handles.push_back(k.submit(sum_of("t." + std::to_string(i), t[i])));
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string what = "step " + std::to_string(step) + " tensor " + std::to_string(i);
      if (k.succeeded(k.wait(handles[i]), what))
        k.expect(std::all_of(t[i].begin(), t[i].end(), [&](float x) { return x == want; }), what + ": wrong values");
    }
    const hs::TuningState s = k.engine().tuning();
    if (step == 0 || s.point.fusion_threshold != last.fusion_threshold || s.point.response_cache != last.response_cache)
      ++settings_seen;
    last = s.point;
    std::vector<float> searching(1, s.searching ? 1.0f : 0.0f);
    hs::TensorRequest flag = sum_of("searching", searching);
    flag.meta.op = hs::ReduceOp::kMax;
    k.succeeded(k.run_blocking(std::move(flag)), "searching flag");
    if (searching[0] == 0.0f) ++after;
    ++step;
  }
  k.expect(after == 5, "the search did not end within 5000 steps");
  k.expect(settings_seen >= 2, "this rank never saw a trial's setting");
  (*finals)[size_t(r)] = k.engine().tuning();
}

}  // namespace

void scenario_autotune() {
  const std::string log = "/tmp/hs_test_engine_autotune." + std::to_string(::getpid()) + ".csv";
  hs::Config cfg = test_config();
  cfg.autotune = true;
  cfg.autotune_log = log;
  cfg.autotune_warmup_samples = 1;
  cfg.autotune_steps_per_sample = 2;
  for (const char* hosts : {"shm", "tcp"}) {
    std::fprintf(stderr, "  autotune on %s x3\n", hosts);
    const bool shm = std::string(hosts) == "shm";
    std::vector<hs::TuningState> finals(3);
    Job(shm ? std::vector<std::string>{"h", "h", "h"} : std::vector<std::string>{"a", "b", "c"}, cfg).run([&](Rank& k) {
      train_until_tuned(k, &finals);
    });
    for (const hs::TuningState& f : finals) {
      expect(f.enabled && !f.searching && f.trial == 8, 0, "a rank did not end the search with 8 trials");
      expect(f.point.fusion_threshold == finals[0].point.fusion_threshold &&
                 f.point.response_cache == finals[0].point.response_cache,
             0, "ranks ended with different settings");
    }
    std::ifstream in(log);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    expect(lines.size() == 10, 0,
           "the log has " + std::to_string(lines.size()) +
               " lines, not a header, 8 trials "
               "and the final choice");
    const std::string chosen =
        std::to_string(finals[0].point.fusion_threshold) + "," + (finals[0].point.response_cache ? "on" : "off") + ",";
    expect(!lines.empty() && lines.back().rfind("final," + chosen, 0) == 0, 0,
           "the log's last line '" + (lines.empty() ? "" : lines.back()) + "' is not final," + chosen + "...");
    std::remove(log.c_str());
  }
}

}  // namespace hs_test
