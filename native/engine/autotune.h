// Autotune (HOROVOD_AUTOTUNE): during a job's first cycles, rank 0 tries settings of the knobs that
// change what its coordinator does, scores each by the bytes of collectives completed per second,
// and keeps the best one for the rest of the job.
//
// The knobs: the fusion threshold (how many bytes of small allreduces one collective takes) and the
// response cache (on, or off: every request validated in full and answered in full). Both act only
// in rank 0's coordinator, whose responses fix every rank's collectives, so ranks cannot disagree;
// rank 0 still sends each setting to the others (kTuningMessage) so that every rank can report it.
// HOROVOD_CYCLE_TIME is not tuned: the engine negotiates as soon as work arrives, and the cycle
// time only bounds an idle sleep that any message or request cuts short, so it does not change
// throughput, and tuning it would fit noise.
//
// The search is a coordinate search over a small grid: first the fusion threshold (the configured
// value, then each value of the grid) with the cache as configured, then the cache the other way
// at the best threshold (only when it is configured on: capacity 0 is the user's choice). With so
// few points a model of the score (Horovod's Bayesian optimisation) would save little, and a grid
// is tried in a bounded, predictable number of cycles.
//
// A sample spans at least HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE cycles (coordinator passes that ran
// collectives) and at least kMinSampleUs; its score is its bytes over the time since the previous
// sample ended, so the framework's compute between collectives counts, as it does for the job. The
// job's first HOROVOD_AUTOTUNE_WARMUP_SAMPLES samples are discarded (first-step costs: buffers,
// page faults, the cache filling), and so is each later trial's first (the step under way began
// with the previous setting); a trial scores the median of its next kScoredSamples, which one
// disturbed sample on a shared machine does not move.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/wire_buffer.h"

namespace hs {

// The control message that carries rank 0's setting to the other ranks (a MessageKind of engine.cc).
constexpr uint8_t kTuningMessage = 4;

struct TuningPoint {
  size_t fusion_threshold = 0;
  bool response_cache = true;
};

// What a rank reports (hvd's autotune_parameters()): the setting in force and where the search is.
struct TuningState {
  bool enabled = false;    // HOROVOD_AUTOTUNE
  bool searching = false;  // trials still running; false once the choice is final
  int trial = 0;           // trials finished so far
  TuningPoint point;
  static TuningState configured(const Config& cfg);  // before any trial: HOROVOD_* as set
  void write(WireWriter& w) const;
  static TuningState read(WireReader& r);
};

class Autotuner {
 public:
  static constexpr int kScoredSamples = 3;
  static constexpr int64_t kMinSampleUs = 100000;

  // Opens HOROVOD_AUTOTUNE_LOG (when set) and writes its header; ConfigError naming the
  // variable and the path when it cannot.
  explicit Autotuner(const Config& cfg);
  ~Autotuner();
  Autotuner(const Autotuner&) = delete;
  Autotuner& operator=(const Autotuner&) = delete;

  // One cycle that ran `bytes` of collectives and ended at now_us. True when state() changed: the
  // caller applies the new point from its next cycle on.
  bool record_cycle(size_t bytes, int64_t now_us);
  const TuningState& state() const { return state_; }

 private:
  struct Result {
    TuningPoint point;
    double score;
    int64_t cycles;
    double seconds;
  };
  void finish_trial();
  void log_row(const std::string& trial, const Result& r);

  TuningState state_;
  std::vector<TuningPoint> plan_;  // the trials, in order; the cache trial is added when known
  bool cache_tunable_;
  std::vector<Result> results_;
  FILE* log_ = nullptr;
  int steps_per_sample_;
  int warmup_left_;
  bool started_ = false, settling_ = false;
  int64_t sample_start_us_ = 0, sample_cycles_ = 0;
  double sample_bytes_ = 0;
  std::vector<double> scores_;  // this trial's scored samples
  int64_t trial_cycles_ = 0;
  double trial_seconds_ = 0;
};

}  // namespace hs
