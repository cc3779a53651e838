// The kinds of control message between engines: each message starts with its kind byte
// (4, kTuningMessage, is autotune.h's).
#pragma once
#include <cstdint>

namespace hs {

enum ControlKind : uint8_t { kRequests = 1, kResponses = 2, kSpeculation = 3 };

}  // namespace hs
