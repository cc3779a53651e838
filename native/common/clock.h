// Clocks for the hot paths. steady_clock costs ~20 ns a read on a VM and the engine reads time on
// every pass (timeouts, health and stall checks); those only need milliseconds.
#pragma once
#include <time.h>

#include <chrono>
#include <cstdint>

namespace hs {

// CLOCK_MONOTONIC_COARSE: the kernel's per-tick copy of the monotonic clock, ~3 ns to read,
// resolution a few milliseconds. For deadlines and periodic checks, never for spin timing.
struct CoarseClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<CoarseClock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return time_point(duration(int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec));
  }
};

inline int64_t coarse_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(CoarseClock::now().time_since_epoch()).count();
}

}  // namespace hs
