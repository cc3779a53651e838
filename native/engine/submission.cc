// How requests enter the engine: checked and queued for the engine thread (enqueue, one at a time,
// or enqueue_batch, a whole step's at once), or refused at once.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/engine.h"
#include "engine/timeline.h"

namespace hs {

// Under queue_mu_: queues `req` (with a fresh handle), or says why not: *err (the handle then
// fails at once) or *duplicate (the caller throws; nothing was queued).
void Engine::admit_locked(TensorRequest& req, std::string* err, HandleError* kind, std::string* duplicate) {
  const RequestMeta& m = req.meta;
  auto ps = process_sets_.find(m.process_set);
  req.key = key_of(m.process_set, m.name);
  const std::string& key = req.key;
  std::thread::id me = std::this_thread::get_id();
  if (submitter_ == std::thread::id()) submitter_ = me;
  else if (submitter_ != me) several_submitters_ = true;
  if (!failed_.empty()) {
    *err = failed_;
    *kind = HandleError::kInternal;
  } else if (ps == process_sets_.end()) {
    *err = std::string(op_type_name(m.type)) + " of '" + m.name + "': unknown process set id " +
           std::to_string(m.process_set) + " (was it removed, or added on some ranks only?)";
  } else if (std::find(ps->second.begin(), ps->second.end(), rank_) == ps->second.end()) {
    *err = std::string(op_type_name(m.type)) + " of '" + m.name + "': rank " + std::to_string(rank_) +
           " is not a member of process set " + std::to_string(m.process_set);
  } else if (inflight_.count(key) || lane_key_is(key)) {
    *duplicate = duplicate_name_message(m.name);
  } else {
    for (int g : gone_)
      if (g == 0 || std::find(ps->second.begin(), ps->second.end(), g) != ps->second.end())
        *err = std::string(op_type_name(m.type)) + " of '" + m.name + "': rank " + std::to_string(g) + " has shut down";
  }
  if (err->empty() && duplicate->empty()) {
    inflight_.insert(key);
    queue_.push_back(std::move(req));  // (key refers into req: used above, not below)
    queued_.store(true, std::memory_order_release);
  }
}

void Engine::wake_engine_thread() {
  transport_.notify_self();
  doorbell_ring(&handoff_);  // in case it is parked after a waiter left (see handoff_)
}

int64_t Engine::enqueue(TensorRequest req, bool wake) {
  if (batched_.load(std::memory_order_relaxed)) batched_.store(false, std::memory_order_relaxed);
  req.handle = handles_.create();
  const int64_t handle = req.handle;
  if (timeline_.active()) req.enqueued_us = Timeline::now_us();  // (its only reader)
  std::string err, duplicate;
  HandleError kind = HandleError::kCollective;
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    admit_locked(req, &err, &kind, &duplicate);
  }
  if (!duplicate.empty()) {
    // Refused at once, as Horovod does (a ValueError from the call): nothing was queued, so the
    // handle is dropped again.
    handles_.fail(handle, HandleError::kCollective, duplicate);
    HandleError dropped;
    handles_.take(handle, &dropped, &duplicate);
    throw std::invalid_argument(duplicate);
  }
  if (!err.empty()) handles_.fail(handle, kind, err);
  else if (wake) wake_engine_thread();
  return handle;
}

std::vector<int64_t> Engine::enqueue_batch(std::vector<TensorRequest> reqs) {
  std::vector<std::string> names;
  names.reserve(reqs.size());
  int32_t process_set = reqs.empty() ? 0 : reqs.front().meta.process_set;
  for (const TensorRequest& r : reqs) {
    if (r.meta.process_set != process_set)
      throw std::invalid_argument("enqueue_batch: every request must be of one process set");
    names.push_back(r.meta.name);
  }
  check_names_free(process_set, names);
  batched_.store(true, std::memory_order_relaxed);
  std::vector<int64_t> handles;
  handles.reserve(reqs.size());
  const int64_t now = timeline_.active() ? Timeline::now_us() : 0;
  for (TensorRequest& r : reqs) {
    r.handle = handles_.create();
    r.enqueued_us = now;
    handles.push_back(r.handle);
  }
  struct Refusal {
    int64_t handle;
    HandleError kind;
    std::string error;
  };
  std::vector<Refusal> refused;
  {
    // One lock for the whole batch: the engine thread takes all of it in one cycle, so the batch
    // is negotiated (and fused) as one, not cut wherever the engine happened to look.
    std::lock_guard<std::mutex> l(queue_mu_);
    for (TensorRequest& r : reqs) {
      std::string err, duplicate;
      HandleError kind = HandleError::kCollective;
      const int64_t handle = r.handle;
      admit_locked(r, &err, &kind, &duplicate);
      if (!duplicate.empty()) err = duplicate;  // (checked above: only a race with another thread)
      if (!err.empty()) refused.push_back({handle, kind, err});
    }
  }
  for (const Refusal& r : refused) handles_.fail(r.handle, r.kind, r.error);
  if (refused.size() < reqs.size()) wake_engine_thread();
  return handles;
}

std::string Engine::duplicate_name_message(const std::string& name) const {
  return "a collective named '" + name + "' is already in flight on rank " + std::to_string(rank_) +
         "; wait for it (synchronize) or give concurrent collectives distinct names";
}

void Engine::check_names_free(int32_t process_set, const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> l(queue_mu_);
  std::unordered_set<std::string> seen;
  for (const std::string& name : names) {
    std::string key = key_of(process_set, name);
    if (inflight_.count(key) || lane_key_is(key)) throw std::invalid_argument(duplicate_name_message(name));
    if (!seen.insert(key).second)
      throw std::invalid_argument("the name '" + name +
                                  "' is given to two collectives of one call; "
                                  "each needs its own");
  }
}

}  // namespace hs
