// A shared-memory segment of two local ranks that one process plays both of (its own pid on both
// doorbells), for tests that drive a ring pair step by step from their own threads.
#pragma once
#include <unistd.h>

#include <memory>
#include <string>

#include "transport/shm_segment.h"

namespace hs_test {

// Already unlinked: nothing is left in /dev/shm however the test ends.
inline std::unique_ptr<hs::ShmSegment> one_process_segment(const std::string& what, size_t data_ring_bytes,
                                                           size_t ctrl_ring_bytes) {
  auto seg = hs::ShmSegment::create("/hs_test_" + what + "_" + std::to_string(::getpid()), 2, data_ring_bytes,
                                    ctrl_ring_bytes);
  seg->unlink();
  for (int i = 0; i < 2; ++i) seg->doorbell(i)->pid.store(uint32_t(::getpid()));
  return seg;
}

}  // namespace hs_test
