// The per-process background engine. Framework threads enqueue requests and get handles; the
// engine thread negotiates with the coordinator (rank 0), executes responses in the order the
// coordinator fixed (so every rank runs the same collectives in the same order), and completes
// handles. A dead peer or a lost coordinator fails every pending and future handle: never a hang.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "engine/coordinator.h"
#include "engine/handle_table.h"
#include "engine/message.h"
#include "engine/timeline.h"
#include "transport/transport.h"

namespace hs {

struct TensorRequest {
  RequestMeta meta;
  const void* in = nullptr;
  void* out = nullptr;
  int64_t handle = 0;
  int64_t enqueued_us = 0;
};

class Engine {
 public:
  Engine(int rank, int size, const Config& cfg);
  ~Engine();
  int listen_port() const { return transport_.listen_port(); }
  // mpi_comm != 0: an MPI_Comm (Open MPI handle) that carries collective data instead of the
  // shared-memory/TCP links; negotiation and liveness still use the links.
  void start(const std::vector<PeerAddress>& peers, const std::string& job_token,
             uintptr_t mpi_comm = 0);
  bool uses_mpi() const { return mpi_comm_ != 0; }
  void shutdown();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return transport_.local_rank(); }
  int local_size() const { return transport_.local_size(); }

  // Waits for a handle; the waiting thread drives the engine itself while it is free, which
  // saves two thread hand-offs per small collective. False on timeout (< 0: no limit).
  bool wait(int64_t handle, double timeout_s);

  // Returns a handle; errors that need no negotiation (unknown process set, duplicate name,
  // engine failed) complete the handle at once.
  int64_t enqueue(TensorRequest req);
  HandleTable& handles() { return handles_; }
  bool process_set_ranks(int32_t id, std::vector<int32_t>* ranks);
  std::vector<int32_t> process_set_ids();
  Timeline& timeline() { return timeline_; }
  const Config& config() const { return cfg_; }

  // Counters that make negotiation behaviour observable (tests, benchmarks, debugging).
  struct Stats {
    std::atomic<int64_t> requests_full{0};     // sent with full metadata
    std::atomic<int64_t> requests_cached{0};   // sent as a response-cache id
    std::atomic<int64_t> responses{0};         // responses executed
    std::atomic<int64_t> responses_cached{0};  // ... that arrived as cache ids (no re-validation)
    std::atomic<int64_t> fused_tensors{0};     // tensors that travelled in a fused response
  };
  Stats& stats() { return stats_; }

 private:
  void loop();
  std::unique_ptr<Group> make_group(const std::vector<int32_t>& ranks);
  bool progress_once();  // one engine pass under progress_mu_; false when nothing moved
  bool take_local_requests();
  bool coordinate();
  bool receive_responses();
  void check_health(bool coordinator);
  void execute(const Response& r);
  void execute_allreduce(const Response& r, Group& g);
  void execute_allgather(const Response& r, Group& g);
  void execute_broadcast(const Response& r, Group& g);
  void execute_alltoall(const Response& r, Group& g);
  void execute_reducescatter(const Response& r, Group& g);
  void remember_cacheable(const Response& r);
  void finish(const std::string& key, HandleResult result);
  void fail_entry(const std::string& key, HandleError kind, const std::string& msg);
  void fatal(const std::string& msg);
  std::string key_of(int32_t ps, const std::string& name) const {
    return std::to_string(ps) + "/" + name;
  }

  int rank_, size_;
  Config cfg_;
  Transport transport_;
  HandleTable handles_;
  Timeline timeline_;
  std::unique_ptr<Coordinator> coordinator_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> dead_{false};           // a fatal error ended the engine
  std::mutex progress_mu_;                  // whoever holds it runs the engine
  std::atomic<int> waiters_driving_{0};     // threads in wait() willing to run the engine
  // The engine thread sleeps here, not on the transport's doorbell, while a waiter drives: the
  // doorbell rings for every chunk a peer moves, and each ring would wake it for nothing.
  Doorbell handoff_{};

  std::mutex queue_mu_;  // guards queue_, inflight_, failed_, gone_, process_sets_
  std::vector<TensorRequest> queue_;
  std::set<std::string> inflight_;
  std::string failed_;
  std::set<int> gone_;
  std::map<int32_t, std::vector<int32_t>> process_sets_;

  // engine-thread state
  std::unordered_map<std::string, TensorRequest> entries_;
  std::map<int32_t, std::unique_ptr<Group>> groups_;
  uintptr_t mpi_comm_ = 0;
  std::unordered_map<std::string, int32_t> my_cache_;       // request signature -> cache id
  std::unordered_map<int32_t, Response> cached_responses_;  // cache id -> single response
  std::vector<uint8_t> fusion_buffer_;
  int64_t last_health_check_us_ = 0, last_stall_check_us_ = 0;
  Stats stats_;
};

}  // namespace hs
