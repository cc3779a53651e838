// The speculative small allreduce, broadcast and allgather (engine.h, Speculation): sending an
// input early, the peers' notes, and finishing an op that every rank sent early.
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/tuning.h"
#include "common/errors.h"
#include "engine/control_kinds.h"
#include "engine/engine.h"

namespace hs {

bool Engine::try_speculate(const TensorRequest& req, int32_t cache_id) {
  const RequestMeta& m = req.meta;
  if (!cfg_.speculative_allreduce || mpi_comm_ || size_ < 2 || spec_.active || !entries_.empty()) return false;
  if (m.process_set != 0 || !req.members.empty() || m.device) return false;
  // What goes out now: the whole input, to every peer, as the direct algorithm sends it (so that a
  // response that comes after all runs that algorithm, only skipping those sends).
  size_t bytes = static_cast<size_t>(m.num_elements()) * dtype_size(m.dtype);
  switch (m.type) {
    case OpType::kAllreduce:
      // (A two-level allreduce cannot take inputs sent early to every peer: no speculation there.)
      if (host_groups(0, OpType::kAllreduce) || m.prescale != 1.0 || m.op == ReduceOp::kAdasum || bytes == 0 ||
          bytes > tuning::kDirectReduceBytes)
        return false;
      break;
    case OpType::kBroadcast:
      if (bytes == 0 || bytes > tuning::kDirectBroadcastBytes) return false;
      if (m.root != rank_) bytes = 0;  // only the root's data moves
      break;
    case OpType::kAllgather: {
      // The cached response says every rank's rows (a cache id stands for one shape on all ranks).
      auto cached = cached_responses_.find(cache_id);
      if (host_groups(0, OpType::kAllgather) || cached == cached_responses_.end() ||
          cached->second.tensor_bytes(0) * static_cast<size_t>(size_) > tuning::kDirectAllgatherBytes)
        return false;
      break;
    }
    default: return false;
  }
  if (bytes > 0 && !transport_.can_send_unread(bytes)) return false;
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    if (!gone_.empty() || several_submitters_) return false;
  }
  send_early(req, req.key, cache_id, bytes);
  return true;
}

void Engine::send_early(const TensorRequest& req, const std::string& key, int32_t cache_id, size_t bytes) {
  const RequestMeta& m = req.meta;
  spec_.active = true;
  spec_.key = key;
  spec_.cache_id = cache_id;
  spec_.seq = op_seq_;
  WireWriter w;
  w.put<uint8_t>(kSpeculation);
  w.put<int32_t>(cache_id);
  w.put<int64_t>(op_seq_);
  std::string note = w.take();
  if (rank_ == 0) coordinator_->add_request(0, m, cache_id, op_seq_);
  stats_.speculative_sent++;
  NotifyBatch one_wakeup_per_peer(transport_);  // for the note and the data together
  for (int p = 0; p < size_; ++p)
    if (p != rank_) transport_.post_control(p, note);
  transport_.progress_control();
  if (m.type == OpType::kAllreduce) allreduce_send_input(*groups_[0], req.in, bytes);
  else send_input_early(*groups_[0], req.in, bytes);
}

void Engine::note_speculation(int peer, WireReader& r) {
  int32_t id = r.get<int32_t>();
  int64_t seq = r.get<int64_t>();
  auto& q = peer_specs_[peer];
  q.emplace_back(id, seq);
  // Notes for ops this rank has already executed through a response are of no further use.
  while (!q.empty() && q.front().second < op_seq_ && !(spec_.active && q.front().second >= spec_.seq)) q.pop_front();
  if (rank_ == 0) {
    const RequestMeta* m = coordinator_->cached_request(id);
    if (!m) throw std::runtime_error("rank " + std::to_string(peer) + " sent unknown cache id");
    coordinator_->add_request(peer, *m, id, seq);
  }
}

Engine::PeerNotes Engine::peers_sent_spec() {
  PeerNotes seen = PeerNotes::kAll;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto& q = peer_specs_[p];
    while (!q.empty() && q.front().second < spec_.seq) q.pop_front();
    if (q.empty()) seen = PeerNotes::kNotYet;
    else if (q.front().first != spec_.cache_id || q.front().second != spec_.seq) return PeerNotes::kDiffer;
  }
  return seen;
}

void Engine::close_speculation() {
  for (int p = 0; p < size_; ++p)
    if (p != rank_) peer_specs_[p].pop_front();
  spec_.active = false;
  op_seq_++;
}

bool Engine::complete_speculation() {
  if (!spec_.active || peers_sent_spec() != PeerNotes::kAll) return false;
  // Every rank sent this same op's input early, so the coordinator answers nothing: finish here.
  close_speculation();
  auto it = entries_.find(spec_.key);
  if (it == entries_.end()) return true;
  const RequestMeta& m = it->second.meta;
  Group& g = *groups_[0];
  if (m.type != OpType::kAllreduce) return complete_data_speculation(it->second);
  size_t n = static_cast<size_t>(m.num_elements());
  const ReductionPlan plan = plan_reduction(m.op, m.postscale, g.size());
  if (timeline_.active()) {
    timeline_.end(m.name);
    timeline_.begin(m.name, "ALLREDUCE");
    timeline_.begin(m.name, "COLLECTIVE");
  }
  try {
    allreduce_after_send(g, it->second.in, it->second.out, n, m.dtype, plan.op, plan.postscale);
    if (timeline_.active()) timeline_.end(m.name);
  } catch (const CollectiveError& e) {
    fail_entry(spec_.key, HandleError::kCollective, e.what());
    return true;
  }
  stats_.speculative_done++;
  if (autotuner_) tune_after_cycle(n * dtype_size(m.dtype));
  finish(spec_.key, HandleResult{});
  return true;
}

bool Engine::complete_data_speculation(const TensorRequest& req) {
  // Every rank sent the same cache id: the response it stands for, validated before, is this
  // round's, with every rank's input sent early.
  Response r = cached_responses_.at(spec_.cache_id);
  r.presend.resize(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) r.presend[static_cast<size_t>(p)] = p;
  const std::string key = spec_.key;
  const size_t bytes = static_cast<size_t>(req.meta.num_elements()) * dtype_size(req.meta.dtype);
  if (timeline_.active()) {
    std::string act = op_type_name(r.type);
    std::transform(act.begin(), act.end(), act.begin(), ::toupper);
    timeline_.end(req.meta.name);
    timeline_.begin(req.meta.name, act);
  }
  try {
    if (r.type == OpType::kBroadcast) execute_broadcast(r, *groups_[0]);
    else execute_allgather(r, *groups_[0]);
  } catch (const CollectiveError& e) {
    fail_entry(key, HandleError::kCollective, e.what());
    return true;
  }
  stats_.speculative_done++;
  if (autotuner_) tune_after_cycle(bytes);
  return true;
}

}  // namespace hs
