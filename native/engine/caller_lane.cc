// The caller's lane (engine.h, LaneMemo): a blocking small allreduce, broadcast or allgather run by
// its own thread.
#include <sched.h>

#include <cstring>

#include "collectives/collectives.h"
#include "collectives/tuning.h"
#include "common/errors.h"
#include "engine/control_kinds.h"
#include "engine/engine.h"

namespace hs {

namespace {
// How long the lane waits for the peers' notes before handing the request to the engine's usual
// passes, which also watch peer health and stalls: as long as a waiter spins before yielding
// (drive_until_done), or yields before sleeping where ranks share CPUs.
constexpr int64_t kLaneSpinUs = 50, kLaneYieldUs = 500;
}  // namespace

bool Engine::lane_key_is(const std::string& key) const {
  const std::string* k = lane_key_.load(std::memory_order_acquire);
  return k && *k == key;
}

Engine::LaneOutcome Engine::run_in_lane(TensorRequest& req, int64_t* handle) {
  const RequestMeta& m = req.meta;
  // The conditions of try_speculate, plus: nothing else of this process queued or in flight, nothing
  // that records or tunes per call, and for an allgather an offered output (its result needs no
  // handle to travel in).
  if (m.process_set != 0 || m.device || !req.members.empty() || !cfg_.speculative_allreduce || mpi_comm_ || size_ < 2 ||
      timeline_.active() || queued_.load(std::memory_order_acquire))
    return LaneOutcome::kNotTaken;
  const size_t bytes = static_cast<size_t>(m.num_elements()) * dtype_size(m.dtype);
  size_t early = bytes;  // what this rank sends ahead
  switch (m.type) {
    case OpType::kAllreduce:
      if (m.prescale != 1.0 || m.op == ReduceOp::kAdasum || bytes == 0 || bytes > tuning::kDirectReduceBytes)
        return LaneOutcome::kNotTaken;
      break;
    case OpType::kBroadcast:
      if (bytes == 0 || bytes > tuning::kDirectBroadcastBytes) return LaneOutcome::kNotTaken;
      if (m.root != rank_) early = 0;
      break;
    case OpType::kAllgather:
      if (!req.out || req.out_bytes == 0 || req.out_bytes > tuning::kDirectAllgatherBytes)
        return LaneOutcome::kNotTaken;
      break;
    default: return LaneOutcome::kNotTaken;
  }
  std::unique_lock<std::mutex> progress(progress_mu_, std::try_to_lock);
  if (!progress.owns_lock()) return LaneOutcome::kNotTaken;
  // (autotuner_ is the engine's state: the pass that ends the search resets it)
  if (dead_ || stop_ || autotuner_ || spec_.active || !entries_.empty() || (rank_ == 0 && coordinator_->has_ready()) ||
      (m.type != OpType::kBroadcast && host_groups(0, m.type)) || (early > 0 && !transport_.can_send_unread(early)))
    return LaneOutcome::kNotTaken;
  const bool memo_hit =
      lane_memo_.id >= 0 && lane_memo_.cache_version == my_cache_version_ && lane_memo_.meta.same_signature(m);
  int32_t id = lane_memo_.id;
  std::vector<size_t> gathered;
  if (!memo_hit) {
    req.key = key_of(0, m.name);
    id = my_cache_.empty() ? -1 : cached_id(req);
    if (id < 0) return LaneOutcome::kNotTaken;
    if (m.type == OpType::kAllgather) {
      // Every rank's rows, as the response this cache id stands for says.
      auto cached = cached_responses_.find(id);
      if (cached == cached_responses_.end()) return LaneOutcome::kNotTaken;
      gathered = cached->second.gathered_bytes();
    }
  }
  const std::vector<size_t>& gather_bytes = memo_hit ? lane_memo_.gathered : gathered;
  if (m.type == OpType::kAllgather) {
    size_t total = 0;
    for (size_t b : gather_bytes) total += b;
    if (total != req.out_bytes) return LaneOutcome::kNotTaken;  // (the usual path allocates the result)
  }
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    // (admit_locked's bookkeeping of who submits, and its refusals, which the usual path reports)
    std::thread::id me = std::this_thread::get_id();
    if (submitter_ == std::thread::id()) submitter_ = me;
    else if (submitter_ != me) several_submitters_ = true;
    if (several_submitters_ || !failed_.empty() || !gone_.empty() || !queue_.empty()) return LaneOutcome::kNotTaken;
    if (!memo_hit) lane_memo_ = LaneMemo{m, id, req.key, my_cache_version_, std::move(gathered)};
    lane_key_.store(&lane_memo_.key, std::memory_order_release);
  }
  try {
    stats_.requests_cached++;
    send_early(req, lane_memo_.key, id, early);
    return lane_wait_and_finish(req, handle);
  } catch (const TransportError& e) {
    hand_over(req, handle);  // (first, so that the failure below fails the caller's handle too)
    dead_ = true;
    fatal(transport_.explain(e.what()));
  } catch (const std::exception& e) {
    hand_over(req, handle);
    dead_ = true;
    fatal(std::string("internal error in the collective engine: ") + e.what());
  }
  return LaneOutcome::kHandedOver;
}

Engine::LaneOutcome Engine::lane_wait_and_finish(TensorRequest& req, int64_t* handle) {
  const int64_t start = Timeline::now_us();
  const int64_t patience = transport_.oversubscribed() ? kLaneYieldUs : kLaneSpinUs;
  PeerNotes notes;
  while ((notes = take_lane_notes()) == PeerNotes::kNotYet) {
    if (stop_ || Timeline::now_us() - start > patience) break;
    if (transport_.oversubscribed()) sched_yield();
    transport_.progress_control();
  }
  if (notes != PeerNotes::kAll) {
    hand_over(req, handle);
    return LaneOutcome::kHandedOver;
  }
  // Every rank sent this op's input early: the direct algorithm runs with its sends already made.
  close_speculation();
  const RequestMeta& m = req.meta;
  Group& g = *groups_[0];
  try {
    switch (m.type) {
      case OpType::kAllreduce: {
        const ReductionPlan plan = plan_reduction(m.op, m.postscale, g.size());
        allreduce_after_send(g, req.in, req.out, static_cast<size_t>(m.num_elements()), m.dtype, plan.op,
                             plan.postscale);
        break;
      }
      case OpType::kBroadcast: {
        const size_t bytes = static_cast<size_t>(m.num_elements()) * dtype_size(m.dtype);
        if (m.root == rank_ && req.in != req.out) std::memcpy(req.out, req.in, bytes);
        broadcast(g, req.out, bytes, m.root, m.root == rank_ ? SentEarly::kByThisRank : SentEarly::kByOthers);
        break;
      }
      default: allgatherv(g, req.in, req.out, lane_memo_.gathered, SentEarly::kByThisRank);
    }
  } catch (const CollectiveError& e) {
    lane_key_.store(nullptr, std::memory_order_release);
    *handle = handles_.create();
    handles_.fail(*handle, HandleError::kCollective, e.what());
    return LaneOutcome::kHandedOver;
  }
  stats_.speculative_done++;
  stats_.caller_lane_done++;
  lane_key_.store(nullptr, std::memory_order_release);
  return LaneOutcome::kDone;
}

Engine::PeerNotes Engine::take_lane_notes() {
  // Only speculation notes are taken here; anything else is for the engine's usual passes.
  std::string msg;
  uint8_t kind;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    while (transport_.peek_control(p, &kind)) {
      if (kind != kSpeculation) return PeerNotes::kDiffer;
      transport_.pop_control(p, &msg);
      WireReader r(msg);
      r.get<uint8_t>();
      note_speculation(p, r);
    }
  }
  // On rank 0 a mix of early and plain submissions makes a response due, which only a pass sends.
  if (rank_ == 0 && coordinator_->has_ready()) return PeerNotes::kDiffer;
  return peers_sent_spec();
}

void Engine::hand_over(TensorRequest& req, int64_t* handle) {
  *handle = handles_.create();
  req.handle = *handle;
  req.key = lane_memo_.key;
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    inflight_.insert(req.key);
    lane_key_.store(nullptr, std::memory_order_release);
  }
  std::string key = req.key;
  entries_.insert_or_assign(std::move(key), std::move(req));
}

}  // namespace hs
