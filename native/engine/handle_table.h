// Completion state of every submitted collective, shared by framework threads (which wait) and the
// engine thread (which completes). Results the core allocates (allgather, alltoall,
// reducescatter) are handed over to the waiter without a copy.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/result_buffer.h"

namespace hs {

enum class HandleError { kNone, kCollective, kInternal };

struct HandleResult {
  ResultBuffer data;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;
  int32_t value = 0;
  bool has_data = false;
};

class HandleTable {
 public:
  int64_t create();
  void complete(int64_t h, HandleResult result);
  // Completes handles that succeeded with no result (a fused allreduce's members) under one lock
  // and one wake-up instead of one per handle.
  void complete_plain(const std::vector<int64_t>& hs);
  void fail(int64_t h, HandleError kind, const std::string& message);
  bool poll(int64_t h);
  // Waits up to timeout_s (< 0: forever); false on timeout. Throws std::out_of_range for an
  // unknown handle.
  bool wait(int64_t h, double timeout_s);
  // Removes a completed handle if it succeeded with no data and a zero value (true), else leaves
  // it for take().
  bool take_if_plain(int64_t h);
  // Removes a completed handle and returns its outcome.
  HandleResult take(int64_t h, HandleError* kind, std::string* message);

 private:
  struct State {
    bool done = false;
    HandleError error = HandleError::kNone;
    std::string message;
    HandleResult result;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<int64_t, State> states_;
  int64_t next_ = 1;
};

}  // namespace hs
