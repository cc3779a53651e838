// Chrome trace (JSON array format, opens in Perfetto and chrome://tracing) of each tensor's
// phases: QUEUE (submitted → taken by the engine), NEGOTIATE_<OP> (→ all ranks ready), <OP>
// (execution) with MEMCPY_IN_FUSION_BUFFER / COLLECTIVE / MEMCPY_OUT_FUSION_BUFFER inside.
// One "process" row per tensor name. Written by rank 0, like Horovod.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

namespace hs {

class Timeline {
 public:
  ~Timeline();
  void start(const std::string& path, bool mark_cycles);  // throws std::runtime_error
  void stop();
  // Read without the lock by every submitting thread and the engine on each request, while another
  // thread may call start() or stop(): an atomic flag, not file_ itself. A stale answer is harmless
  // (begin/end look at file_ again under the lock).
  bool active() const { return active_.load(std::memory_order_relaxed); }
  void begin(const std::string& tensor, const std::string& activity, int64_t ts_us = -1);
  void end(const std::string& tensor, int64_t ts_us = -1);
  void mark_cycle();
  static int64_t now_us();

 private:
  int pid_for(const std::string& tensor);
  void write_event(const std::string& json);
  std::mutex mu_;
  FILE* file_ = nullptr;
  std::atomic<bool> active_{false};  // file_ != nullptr
  bool mark_cycles_ = false;
  bool first_ = true;
  int64_t last_flush_us_ = 0;
  std::unordered_map<std::string, int> pids_;
};

}  // namespace hs
