#pragma once

#include <cstdint>

namespace hs {

// The links between two ranks: liveness (goodbyes and failures, watched by keepalive), control
// messages, and collective data. Ranks on one host use shared memory for the last two.
enum Channel : uint32_t { kLiveness = 0, kControl = 1, kData = 2 };

}  // namespace hs
