#include "engine/autotune.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/errors.h"

namespace hs {

namespace {
// Fusion thresholds tried after the configured one. Tensors of 256 KiB and more never fuse (see
// Coordinator::fuse), so the grid spans what small tensors fill: from a few of them to every
// one a large model has.
constexpr size_t kFusionGrid[] = {size_t(64) << 10, size_t(256) << 10, size_t(1) << 20,
                                  size_t(4) << 20,  size_t(16) << 20,  size_t(64) << 20};
}  // namespace

TuningState TuningState::configured(const Config& cfg) {
  TuningState s;
  s.enabled = s.searching = cfg.autotune;
  s.point = TuningPoint{cfg.fusion_threshold, cfg.cache_capacity > 0};
  return s;
}

void TuningState::write(WireWriter& w) const {
  w.put<uint8_t>(enabled);
  w.put<uint8_t>(searching);
  w.put<int32_t>(trial);
  w.put<uint64_t>(point.fusion_threshold);
  w.put<uint8_t>(point.response_cache);
}

TuningState TuningState::read(WireReader& r) {
  TuningState s;
  s.enabled = r.get<uint8_t>() != 0;
  s.searching = r.get<uint8_t>() != 0;
  s.trial = r.get<int32_t>();
  s.point.fusion_threshold = static_cast<size_t>(r.get<uint64_t>());
  s.point.response_cache = r.get<uint8_t>() != 0;
  return s;
}

Autotuner::Autotuner(const Config& cfg)
    : cache_tunable_(cfg.cache_capacity > 0),
      steps_per_sample_(cfg.autotune_steps_per_sample),
      warmup_left_(cfg.autotune_warmup_samples) {
  state_ = TuningState::configured(cfg);
  const TuningPoint configured = state_.point;
  plan_.push_back(configured);
  for (size_t t : kFusionGrid)
    if (t != configured.fusion_threshold) plan_.push_back(TuningPoint{t, configured.response_cache});
  if (cfg.autotune_log.empty()) return;
  log_ = std::fopen(cfg.autotune_log.c_str(), "w");
  if (!log_)
    throw ConfigError("HOROVOD_AUTOTUNE_LOG='" + cfg.autotune_log + "' cannot be written (" + std::strerror(errno) +
                      "); give a writable file path or unset it");
  std::fputs("trial,fusion_threshold_bytes,response_cache,score_bytes_per_second,cycles,seconds\n", log_);
  std::fflush(log_);
}

Autotuner::~Autotuner() {
  if (log_) std::fclose(log_);
}

bool Autotuner::record_cycle(size_t bytes, int64_t now_us) {
  if (!state_.searching) return false;
  if (!started_) {  // (when this first cycle began is unknown: it only starts the clock)
    started_ = true;
    sample_start_us_ = now_us;
    return false;
  }
  sample_bytes_ += static_cast<double>(bytes);
  ++sample_cycles_;
  const int64_t elapsed_us = now_us - sample_start_us_;
  if (sample_cycles_ < steps_per_sample_ || elapsed_us < kMinSampleUs) return false;
  const double seconds = elapsed_us * 1e-6;
  const double score = sample_bytes_ / seconds;
  const int64_t cycles = sample_cycles_;
  sample_start_us_ = now_us;
  sample_bytes_ = 0;
  sample_cycles_ = 0;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return false;
  }
  if (settling_) {
    settling_ = false;
    return false;
  }
  scores_.push_back(score);
  trial_cycles_ += cycles;
  trial_seconds_ += seconds;
  if (static_cast<int>(scores_.size()) < kScoredSamples) return false;
  finish_trial();
  return true;
}

void Autotuner::finish_trial() {
  std::sort(scores_.begin(), scores_.end());
  Result done{state_.point, scores_[scores_.size() / 2], trial_cycles_, trial_seconds_};
  results_.push_back(done);
  log_row(std::to_string(results_.size() - 1), done);
  scores_.clear();
  trial_cycles_ = 0;
  trial_seconds_ = 0;
  state_.trial = static_cast<int>(results_.size());
  auto best = std::max_element(results_.begin(), results_.end(),
                               [](const Result& a, const Result& b) { return a.score < b.score; });
  // The fusion thresholds are all tried: the cache the other way, at the best of them.
  if (results_.size() == plan_.size() && cache_tunable_ && plan_.back().response_cache == plan_[0].response_cache)
    plan_.push_back(TuningPoint{best->point.fusion_threshold, !plan_[0].response_cache});
  if (results_.size() < plan_.size()) {
    state_.point = plan_[results_.size()];
    settling_ = true;
    return;
  }
  state_.point = best->point;
  state_.searching = false;
  log_row("final", *best);
  if (log_) {
    std::fclose(log_);
    log_ = nullptr;
  }
}

void Autotuner::log_row(const std::string& trial, const Result& r) {
  if (!log_) return;
  std::fprintf(log_, "%s,%zu,%s,%.0f,%lld,%.3f\n", trial.c_str(), r.point.fusion_threshold,
               r.point.response_cache ? "on" : "off", r.score, static_cast<long long>(r.cycles), r.seconds);
  std::fflush(log_);
}

}  // namespace hs
