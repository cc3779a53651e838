#include "engine/timeline.h"

#include <chrono>
#include <stdexcept>

namespace hs {

namespace {
std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      o += ' ';
      continue;
    }
    o += c;
  }
  return o;
}
}  // namespace

int64_t Timeline::now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> l(mu_);
  if (file_) return;
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) throw std::runtime_error("cannot open timeline file '" + path + "' for writing");
  std::fputs("[\n", file_);
  first_ = true;
  mark_cycles_ = mark_cycles;
  pids_.clear();
  active_ = true;
}

void Timeline::stop() {
  std::lock_guard<std::mutex> l(mu_);
  if (!file_) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
  active_ = false;
}

void Timeline::write_event(const std::string& json) {
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(json.c_str(), file_);
  int64_t now = now_us();
  // Flushed about once a second, so a crashed job still leaves a readable trace.
  if (now - last_flush_us_ > 1000000) {
    std::fflush(file_);
    last_flush_us_ = now;
  }
}

int Timeline::pid_for(const std::string& tensor) {
  auto it = pids_.find(tensor);
  if (it != pids_.end()) return it->second;
  int pid = static_cast<int>(pids_.size()) + 1;
  pids_[tensor] = pid;
  write_event("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) +
              ", \"args\": {\"name\": \"" + json_escape(tensor) + "\"}}");
  write_event("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) +
              ", \"args\": {\"sort_index\": " + std::to_string(pid) + "}}");
  return pid;
}

void Timeline::begin(const std::string& tensor, const std::string& activity, int64_t ts) {
  std::lock_guard<std::mutex> l(mu_);
  if (!file_) return;
  int pid = pid_for(tensor);
  write_event("{\"ph\": \"B\", \"name\": \"" + json_escape(activity) + "\", \"ts\": " +
              std::to_string(ts < 0 ? now_us() : ts) + ", \"pid\": " + std::to_string(pid) + ", \"tid\": 0}");
}

void Timeline::end(const std::string& tensor, int64_t ts) {
  std::lock_guard<std::mutex> l(mu_);
  if (!file_) return;
  int pid = pid_for(tensor);
  write_event("{\"ph\": \"E\", \"ts\": " + std::to_string(ts < 0 ? now_us() : ts) +
              ", \"pid\": " + std::to_string(pid) + ", \"tid\": 0}");
}

void Timeline::mark_cycle() {
  std::lock_guard<std::mutex> l(mu_);
  if (!file_ || !mark_cycles_) return;
  write_event("{\"ph\": \"i\", \"name\": \"CYCLE_START\", \"s\": \"g\", \"ts\": " + std::to_string(now_us()) +
              ", \"pid\": 0, \"tid\": 0}");
}

}  // namespace hs
