// Chrome trace (JSON array format, opens in Perfetto and chrome://tracing) of each tensor's
// phases: QUEUE (submitted → taken by the engine), NEGOTIATE_<OP> (→ all ranks ready), <OP>
// (execution) with MEMCPY_IN_FUSION_BUFFER / COLLECTIVE / MEMCPY_OUT_FUSION_BUFFER inside.
// One "process" row per tensor name. Written by rank 0, like Horovod.
#pragma once
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
  bool active() const { return file_ != nullptr; }
  void begin(const std::string& tensor, const std::string& activity, int64_t ts_us = -1);
  void end(const std::string& tensor, int64_t ts_us = -1);
  void mark_cycle();
  static int64_t now_us();

 private:
  int pid_for(const std::string& tensor);
  void write_event(const std::string& json);
  std::mutex mu_;
  FILE* file_ = nullptr;
  bool mark_cycles_ = false;
  bool first_ = true;
  int64_t last_flush_us_ = 0;
  std::unordered_map<std::string, int> pids_;
};

}  // namespace hs
