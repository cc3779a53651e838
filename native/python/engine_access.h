// The process-wide engine as the binding's calls reach it (module.cc owns it), shared with the
// latency paths of fast_calls.cc.
#pragma once
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace hs {
namespace binding {

// The engine, held for the duration of a call; a ValueError before hvd.init().
std::shared_ptr<Engine> engine();

// The engine for one latency-path call, or null with a ValueError set; shutdown() does not let the
// engine go while this lives. (Counted before the load, both seq_cst: shutdown() clears the pointer
// and then reads the count, so either it sees this call or this call sees no engine.)
class FastEngine {
 public:
  FastEngine();
  ~FastEngine();
  FastEngine(const FastEngine&) = delete;
  FastEngine& operator=(const FastEngine&) = delete;
  Engine* get() const { return e_; }

 private:
  Engine* e_ = nullptr;
};

// A request from the binding's arguments; std::invalid_argument for an unknown dtype code or a
// negative dimension.
TensorRequest make_request(int type, std::string name, uintptr_t in_ptr, uintptr_t out_ptr, int dtype,
                           std::vector<int64_t> shape, int root, int op, double prescale, double postscale,
                           int process_set, const std::vector<int64_t>& splits);

// Returns (error_kind, message, data, shape, splits, value); data is a numpy uint8 array that owns
// the core's result buffer (moved, not copied), or None.
pybind11::tuple take(Engine& e, int64_t h);
// A completed handle's outcome for Python. The common one (success, no data, no value) is a bare
// True: no tuple, shape or splits objects per handle, which also spares the cyclic GC work in a
// training step. Otherwise take()'s tuple.
pybind11::object outcome(Engine& e, int64_t h);

}  // namespace binding
}  // namespace hs
