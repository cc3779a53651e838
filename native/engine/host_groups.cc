// The engine's side of the two-level collectives (collectives/hierarchical.h): which process sets
// use them, the host groups they run over, and the dispatch between them and the flat algorithms.
#include <algorithm>
#include <cstdint>

#include "collectives/collectives.h"
#include "engine/engine.h"

namespace hs {

void Engine::agree_on_hierarchy() {
  // A rank that chose differently from its peers would wait in a collective the others never run:
  // rank 0's settings decide for everyone (one small broadcast when the engine starts).
  if (size_ < 2 || mpi_comm_) return;
  uint8_t setting[2] = {static_cast<uint8_t>(cfg_.hierarchical_allreduce),
                        static_cast<uint8_t>(cfg_.hierarchical_allgather)};
  broadcast(*make_group(process_sets_[0]), setting, sizeof(setting), 0);
  cfg_.hierarchical_allreduce = static_cast<Switch>(setting[0]);
  cfg_.hierarchical_allgather = static_cast<Switch>(setting[1]);
}

void Engine::add_group(int32_t process_set, const std::vector<int32_t>& ranks) {
  groups_[process_set] = make_group(ranks);
  std::unique_ptr<HostGroups> h;
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  // Under MPI the data never touches our links, so the host groups would have nothing to run on.
  if (!mpi_comm_ && me != ranks.end()) {
    std::vector<std::string> host_of;
    for (int32_t r : ranks) host_of.push_back(transport_.host_id(r));
    HostLayout layout(host_of, static_cast<int>(me - ranks.begin()));
    const bool allreduce = layout.applies(cfg_.hierarchical_allreduce);
    const bool allgather = layout.applies(cfg_.hierarchical_allgather);
    if (allreduce || allgather) {
      h.reset(new HostGroups(std::move(layout)));
      h->allreduce = allreduce;
      h->allgather = allgather;
      const HostLayout& l = h->layout;
      std::vector<int32_t> local, cross;
      for (int i : l.hosts[size_t(l.my_host)]) local.push_back(ranks[size_t(i)]);
      h->local = make_group(local);
      if (l.my_local < l.lanes) {
        for (const auto& members : l.hosts) cross.push_back(ranks[size_t(members[size_t(l.my_local)])]);
        h->cross = make_group(cross);
      }
    }
  }
  std::lock_guard<std::mutex> lock(queue_mu_);
  hierarchical_[process_set] = {h && h->allreduce, h && h->allgather};
  if (h) host_groups_[process_set] = std::move(h);
  else host_groups_.erase(process_set);
}

void Engine::remove_group(int32_t process_set) {
  groups_.erase(process_set);
  if (nccl_) nccl_->forget(process_set);
  std::lock_guard<std::mutex> lock(queue_mu_);
  host_groups_.erase(process_set);
  hierarchical_.erase(process_set);
}

bool Engine::hierarchical(int32_t process_set, OpType type) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  auto it = hierarchical_.find(process_set);
  if (it == hierarchical_.end()) return false;
  return type == OpType::kAllreduce ? it->second.first : type == OpType::kAllgather && it->second.second;
}

HostGroups* Engine::host_groups(int32_t process_set, OpType type) {
  auto it = host_groups_.find(process_set);
  if (it == host_groups_.end()) return nullptr;
  HostGroups* h = it->second.get();
  return (type == OpType::kAllreduce ? h->allreduce : type == OpType::kAllgather && h->allgather) ? h : nullptr;
}

void Engine::reduce_all(int32_t process_set, Group& g, const void* in, void* out, size_t count, DataType dtype,
                        ReduceOp op, double postscale) {
  if (HostGroups* h = host_groups(process_set, OpType::kAllreduce)) {
    hierarchical_allreduce(*h, in, out, count, dtype, op, postscale);
    stats_.hierarchical_allreduces++;
  } else {
    allreduce(g, in, out, count, dtype, op, postscale);
  }
}

void Engine::gather_all(int32_t process_set, Group& g, const void* in, void* out, const std::vector<size_t>& bytes) {
  if (HostGroups* h = host_groups(process_set, OpType::kAllgather)) {
    hierarchical_allgatherv(*h, in, out, bytes);
    stats_.hierarchical_allgathers++;
  } else {
    allgatherv(g, in, out, bytes);
  }
}

}  // namespace hs
