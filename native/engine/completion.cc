// How entries leave the engine: completed (one, or a fused response's members at once), failed
// one by one, or all failed when the engine itself cannot go on.
#include <cstdio>

#include "engine/engine.h"

namespace hs {

void Engine::finish(const std::string& key_ref, HandleResult result) {
  auto it = entries_.find(key_ref);
  if (it == entries_.end()) return;
  if (timeline_.active()) timeline_.end(it->second.meta.name);
  int64_t handle = it->second.handle;
  // Out of the map but alive until the end of this scope: key_ref may live inside the entry, and
  // the node's key serves the erase below without a copy.
  auto node = entries_.extract(it);
  {
    // Before completing: the waiter may resubmit the same name the moment it wakes.
    std::lock_guard<std::mutex> l(queue_mu_);
    inflight_.erase(node.key());
  }
  handles_.complete(handle, std::move(result));
}

void Engine::finish_members(const std::vector<Entries::iterator>& members) {
  std::vector<int64_t> handles;
  std::vector<std::string> keys;
  handles.reserve(members.size());
  keys.reserve(members.size());
  for (auto it : members) {
    if (it == entries_.end()) continue;
    if (timeline_.active()) timeline_.end(it->second.meta.name);
    handles.push_back(it->second.handle);
    keys.push_back(std::move(it->second.key));  // (the map's own key stays valid for erase)
    entries_.erase(it);
  }
  {
    // Before completing: a waiter may resubmit the same names the moment it wakes.
    std::lock_guard<std::mutex> l(queue_mu_);
    for (const auto& k : keys) inflight_.erase(k);
  }
  handles_.complete_plain(handles);
}

void Engine::fail_entry(const std::string& key_ref, HandleError kind, const std::string& msg) {
  const std::string key = key_ref;  // key_ref may live inside the entry erased below
  if (spec_.active && spec_.key == key) spec_.active = false;  // e.g. a peer left mid-way
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  int64_t handle = it->second.handle;
  entries_.erase(it);
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    inflight_.erase(key);
  }
  handles_.fail(handle, kind, msg);
}

void Engine::fatal(const std::string& msg) {
  std::vector<TensorRequest> queued;
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    failed_ = msg;
    queued.swap(queue_);
    transport_.set_failure(msg);
    inflight_.clear();
  }
  for (auto& kv : entries_) handles_.fail(kv.second.handle, HandleError::kInternal, msg);
  entries_.clear();
  // A batch cut short by the error: requests not yet moved into entries_ (failing a handle twice
  // is harmless, so the moved-from ones need no telling apart).
  for (auto& t : taken_) handles_.fail(t.handle, HandleError::kInternal, msg);
  taken_.clear();
  for (auto& q : queued) handles_.fail(q.handle, HandleError::kInternal, msg);
  std::fprintf(stderr, "[horovod_spark] rank %d: %s\n", rank_, msg.c_str());
  std::fflush(stderr);
}

}  // namespace hs
