// Rank 0's negotiation: collects every rank's requests, decides which tensors are ready on all
// ranks of their process set, checks that the ranks agree (dtype, shape, op, root...), plans
// fusion, and remembers accepted requests in a response cache so that a steady-state training
// step's messages shrink to a few integers and skip re-validation.
#pragma once
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "engine/cached_lane.h"
#include "engine/message.h"

namespace hs {

class Coordinator {
 public:
  Coordinator(int size, const Config& cfg);
  // A request from `rank`; cache_id >= 0 means the rank sent only the id of a cached request.
  // spec_seq >= 0: the rank already sent its input to every peer (speculative small allreduce)
  // as its op number spec_seq; see Engine::try_speculate.
  void add_request(int rank, const RequestMeta& meta, int32_t cache_id, int64_t spec_seq = -1);
  // Requests arriving as cache ids are resolved here (nullptr if unknown).
  const RequestMeta* cached_request(int32_t id) const;
  // Responses that became ready, in the order every rank must execute them.
  std::vector<Response> take_ready();
  // Whether take_ready() has anything to give (the engine asks on every pass, mostly idle ones).
  bool has_ready() const { return !ready_.empty() || !join_responses_.empty(); }
  // Warnings (and, past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, error responses) for tensors that
  // some ranks submitted and others did not.
  void check_stalls(std::vector<Response>* errors);
  const std::vector<int32_t>* process_set(int32_t id) const;
  // True when some pending work could complete without a further request from `rank`: a tensor
  // of a process set `rank` is not in, or one `rank` already submitted or joined past.
  bool has_work_without(int rank) const;
  // Autotune's trials (engine/autotune.h): the fusion threshold, and whether the response cache
  // is used. Off, requests that arrive as cache ids are validated and answered in full, and no new
  // ids are given; on again, the ids given before still hold.
  void set_tuning(size_t fusion_threshold, bool response_cache);

 private:
  struct Pending {
    std::map<int, RequestMeta> by_rank;
    std::map<int, int32_t> cache_ids;
    std::map<int, int64_t> spec_seq;  // ranks that sent their input early, with their op number
    CoarseClock::time_point first_seen, last_warned;
    bool queued = false;  // already in ready_
  };
  std::string key(const RequestMeta& m) const;
  // The general path for one request under its key `k`.
  void add_pending(int rank, const RequestMeta& meta, int32_t cache_id, int64_t spec_seq, const std::string& k);
  // The steady-state lane (see CachedLane); false when the request must take the general path.
  bool try_cached_lane(int rank, int32_t cache_id, int64_t spec_seq);
  // Hand a partial lane entry (of cache id `id`, or of the tensor `k`) to the general path.
  void move_to_pending(int32_t id);
  void move_tensor_to_pending(const std::string& k);
  bool complete(const Pending& p, int32_t ps) const;
  Response build(const std::string& key, Pending& p);
  Response build_response(const std::string& key, Pending& p);
  // Every rank of the set sent its input early as the same op: each completes on its own.
  bool completed_by_speculation(const Pending& p) const;
  void note_presend(const Pending& p, Response* r) const;
  void validate(const Pending& p, const std::vector<int32_t>& ranks, Response* out);
  void mark_ready_if_complete(const std::string& key);
  void handle_join(int rank);
  // " Ranks [..] asked for <change> instead." for each pending process-set change but `except`.
  std::string other_set_changes(const std::string& except) const;
  // A ready tensor: a response built by the general path, or a cache id from the lane.
  struct Piece {
    int32_t cached = -1;
    Response own;
  };
  void fuse(std::vector<Piece>& in, std::vector<Response>* out);

  int size_;
  Config cfg_;
  std::unordered_map<std::string, Pending> pending_;  // by key(): "<process set>/<name>"
  // A rank that finished a round on its own (speculative allreduce) may submit the same tensor's
  // next round before this coordinator has closed the previous one: held here, in order, until
  // that round leaves pending_.
  struct Deferred {
    int rank;
    RequestMeta meta;
    int32_t cache_id;
    int64_t spec_seq;
  };
  std::map<std::string, std::vector<Deferred>> deferred_;
  void replay_deferred(const std::vector<std::string>& keys);
  // Tensors every rank has submitted, in completion order: a pending_ key, or a lane cache id.
  struct Ready {
    int32_t cached = -1;
    std::string key;
  };
  std::vector<Ready> ready_;
  std::set<int> joined_;
  int last_joined_ = -1;
  std::map<int32_t, std::vector<int32_t>> process_sets_;
  int32_t next_process_set_ = 1;
  // response cache
  std::unordered_map<std::string, int32_t> cache_by_signature_;
  std::vector<RequestMeta> cached_requests_;
  std::vector<std::string> cached_keys_;  // key() of each cached request: built once, not per step
  std::vector<Response> cached_responses_;
  std::unordered_map<std::string, int32_t> tensor_numbers_;  // key() -> the lane's tensor number
  CachedLane lane_;
  bool cache_off_ = false;  // set_tuning's response_cache, inverted
  std::vector<Response> join_responses_;
};

}  // namespace hs
