// The engine's side of autotune (engine/autotune.h): rank 0 feeds its tuner each cycle and puts the
// settings it chooses in force; every rank keeps the setting in force for tuning().
#include "engine/engine.h"

namespace hs {

TuningState Engine::tuning() const {
  std::lock_guard<std::mutex> l(tuning_mu_);
  return tuning_;
}

void Engine::tune_after_cycle(const std::vector<Response>& responses) {
  size_t bytes = 0;
  for (const Response& r : responses)
    if (r.error.empty())
      for (size_t t = 0; t < r.shapes.size(); ++t) bytes += r.tensor_bytes(t);
  tune_after_cycle(bytes);
}

void Engine::tune_after_cycle(size_t bytes) {
  if (!autotuner_->record_cycle(bytes, Timeline::now_us())) return;
  const TuningState state = autotuner_->state();
  coordinator_->set_tuning(state.point.fusion_threshold, state.point.response_cache);
  {
    std::lock_guard<std::mutex> l(tuning_mu_);
    tuning_ = state;
  }
  // The other ranks learn it ahead of the responses fused under it (one link keeps its order).
  WireWriter w;
  w.put<uint8_t>(kTuningMessage);
  state.write(w);
  const std::string encoded = w.take();
  for (int p = 1; p < size_; ++p) transport_.post_control(p, encoded);
  if (!state.searching) autotuner_.reset();  // the choice stands for the rest of the job
}

void Engine::take_tuning(WireReader& r) {
  TuningState state = TuningState::read(r);
  std::lock_guard<std::mutex> l(tuning_mu_);
  tuning_ = state;
}

}  // namespace hs
