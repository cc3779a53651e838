#include "engine/handle_table.h"

#include <chrono>
#include <stdexcept>
#include <thread>

namespace hs {

int64_t HandleTable::create() {
  std::lock_guard<std::mutex> l(mu_);
  int64_t h = next_++;
  states_[h];
  return h;
}

void HandleTable::complete(int64_t h, HandleResult result) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = states_.find(h);
    if (it == states_.end() || it->second.done) return;
    it->second.done = true;
    it->second.result = std::move(result);
  }
  cv_.notify_all();
}

void HandleTable::complete_plain(const std::vector<int64_t>& hs) {
  if (hs.empty()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (int64_t h : hs) {
      auto it = states_.find(h);
      if (it != states_.end()) it->second.done = true;
    }
  }
  cv_.notify_all();
}

void HandleTable::fail(int64_t h, HandleError kind, const std::string& message) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = states_.find(h);
    if (it == states_.end() || it->second.done) return;
    it->second.done = true;
    it->second.error = kind;
    it->second.message = message;
  }
  cv_.notify_all();
}

bool HandleTable::poll(int64_t h) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = states_.find(h);
  if (it == states_.end()) throw std::out_of_range("unknown or already synchronized handle");
  return it->second.done;
}

bool HandleTable::wait(int64_t h, double timeout_s) {
  // A short spin first: small collectives finish in microseconds, and sleeping on the condition
  // variable would add a scheduler round trip to each.
  auto spin_end = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  while (std::chrono::steady_clock::now() < spin_end) {
    if (poll(h)) return true;
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> l(mu_);
  auto it = states_.find(h);
  if (it == states_.end()) throw std::out_of_range("unknown or already synchronized handle");
  auto done = [&] { return states_[h].done; };
  if (timeout_s < 0) {
    cv_.wait(l, done);
    return true;
  }
  return cv_.wait_for(l, std::chrono::duration<double>(timeout_s), done);
}

bool HandleTable::take_if_plain(int64_t h) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = states_.find(h);
  if (it == states_.end()) throw std::out_of_range("unknown or already synchronized handle");
  const State& st = it->second;
  if (!st.done || st.error != HandleError::kNone || st.result.has_data || st.result.value != 0 ||
      !st.result.shape.empty() || !st.result.splits.empty())
    return false;
  states_.erase(it);
  return true;
}

HandleResult HandleTable::take(int64_t h, HandleError* kind, std::string* message) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = states_.find(h);
  if (it == states_.end()) throw std::out_of_range("unknown or already synchronized handle");
  HandleResult r = std::move(it->second.result);
  *kind = it->second.error;
  *message = it->second.message;
  states_.erase(it);
  return r;
}

}  // namespace hs
