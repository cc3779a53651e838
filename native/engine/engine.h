// The per-process background engine. Framework threads enqueue requests and get handles; the
// engine thread negotiates with the coordinator (rank 0), executes responses in the order the
// coordinator fixed (so every rank runs the same collectives in the same order), and completes
// handles. A dead peer or a lost coordinator fails every pending and future handle: never a hang.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collectives/hierarchical.h"
#include "common/config.h"
#include "engine/autotune.h"
#include "engine/coordinator.h"
#include "engine/handle_table.h"
#include "engine/message.h"
#include "engine/timeline.h"
#include "gpu/nccl_plane.h"
#include "transport/transport.h"

namespace hs {

// One member of a packed group (see TensorRequest::members).
struct PackedMember {
  const void* in;
  void* out;
  size_t bytes;
};

struct TensorRequest {
  RequestMeta meta;
  const void* in = nullptr;
  void* out = nullptr;
  // A grouped allreduce travels as one request whose tensor is the concatenation of its members
  // (meta.shape = {total elements}, meta.splits = the members' shapes, so ranks are checked
  // member by member): one negotiation, one cache id and one handle for the whole group. The
  // members' memory is listed here instead of in/out (see Engine::execute_allreduce).
  std::vector<PackedMember> members;
  int64_t handle = 0;
  int64_t enqueued_us = 0;
  bool caller_waits = false;  // submitted through run(): nothing else from that thread meanwhile
  // Allgather, alltoall and reducescatter allocate their result unless the caller offers `out`:
  // out_bytes bytes there, used when the result has exactly that size (the handle then completes
  // with no data, and the caller, who sized it, knows the shape). 0: no buffer offered.
  size_t out_bytes = 0;
  bool received_splits_wanted = true;  // alltoall: report the received splits with the result
  // meta.device requests: the CUDA device holding in/out, and the caller's cudaStream_t, whose
  // queued work the collective waits for and whose later work waits for the collective.
  int32_t device = -1;
  uintptr_t stream = 0;
  std::string key;            // "<process set>/<name>", set by enqueue()
};

// How a reduction runs: Average is Sum followed by a scale of 1/size, folded into postscale.
struct ReductionPlan {
  ReduceOp op;
  double postscale;
};
ReductionPlan plan_reduction(ReduceOp op, double postscale, int group_size);

class Engine {
 public:
  // bind_host: the address the peer port listens on ("" for every interface).
  Engine(int rank, int size, const Config& cfg, const std::string& bind_host = "");
  ~Engine();
  int listen_port() const { return transport_.listen_port(); }
  // mpi_comm != 0: an MPI_Comm (Open MPI handle) that carries collective data instead of the
  // shared-memory/TCP links; negotiation and liveness still use the links.
  void start(const std::vector<PeerAddress>& peers, const std::string& job_token, uintptr_t mpi_comm = 0);
  bool uses_mpi() const { return mpi_comm_ != 0; }
  // Stops the engine: pending and later handles fail. Other threads may be waiting on handles
  // meanwhile (they get the error); the Engine must outlive their calls.
  void shutdown();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return transport_.local_rank(); }
  int local_size() const { return transport_.local_size(); }

  // Waits for a handle; the waiting thread drives the engine itself while it is free, which
  // saves two thread hand-offs per small collective. False on timeout (< 0: no limit).
  bool wait(int64_t handle, double timeout_s);
  // enqueue() then wait() for a caller that blocks at once: the engine thread stays parked from
  // the start instead of picking the request up and handing it back. *handle is set either way:
  // kRanByCaller when the caller's lane finished it (done, no data: nothing to take).
  bool run(TensorRequest req, double timeout_s, int64_t* handle);
  static constexpr int64_t kRanByCaller = 0;  // (handles start at 1)

  // Returns a handle; errors that need no negotiation (unknown process set, engine failed)
  // complete the handle at once. A name already in flight throws std::invalid_argument instead
  // (Horovod refuses it from the call), and nothing is queued.
  int64_t enqueue(TensorRequest req, bool wake = true);
  // Requests of one process set queued together (all checked first, as check_names_free does):
  // the engine thread sees all of them in one cycle. Their handles, in order.
  std::vector<int64_t> enqueue_batch(std::vector<TensorRequest> reqs);
  // Throws std::invalid_argument when one of `names` (of `process_set`) is already in flight, or
  // repeats: lets a caller that submits several requests check them all before queuing any.
  void check_names_free(int32_t process_set, const std::vector<std::string>& names);
  HandleTable& handles() { return handles_; }
  bool process_set_ranks(int32_t id, std::vector<int32_t>* ranks);
  // Whether collectives of `type` (allreduce, allgather) in this process set run in two levels
  // (collectives/hierarchical.h); false for a set this rank is not in.
  bool hierarchical(int32_t process_set, OpType type);
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
    std::atomic<int64_t> scattered_allreduces{0};  // fused allreduces run with no fusion-buffer copy
    std::atomic<int64_t> speculative_sent{0};  // small allreduces whose input left before negotiation
    std::atomic<int64_t> speculative_done{0};  // ... that then completed with no response at all
    std::atomic<int64_t> caller_lane_done{0};  // ... of those, run start to end by the caller's lane
    std::atomic<int64_t> hierarchical_allreduces{0};  // allreduces run in two levels (hierarchical.h)
    std::atomic<int64_t> hierarchical_allgathers{0};  // allgathers run in two levels
    std::atomic<int64_t> nccl_collectives{0};  // responses the NCCL data plane ran (device memory)
  };
  Stats& stats() { return stats_; }
  // Bytes received single-copy from peers on this host (transport/single_copy.h).
  int64_t single_copy_bytes() const { return transport_.single_copy_bytes(); }
  // Of the single-copy bytes peers received, those this rank wrote into them itself (shared copies).
  int64_t shared_copy_bytes() const { return transport_.shared_copy_bytes(); }
  int local_cpus() const { return transport_.local_cpus(); }
  bool ranks_share_cpus() const { return transport_.oversubscribed(); }
  // Autotune's setting in force on this rank and where rank 0's search is (engine_tuning.cc).
  TuningState tuning() const;

 private:
  void loop();
  std::unique_ptr<Group> make_group(const std::vector<int32_t>& ranks);
  // host_groups.cc: the two-level groups of a set of ranks (null where neither collective uses
  // them); every rank takes rank 0's HOROVOD_HIERARCHICAL_ALLREDUCE and HOROVOD_HIERARCHICAL_ALLGATHER,
  // so that all choose alike.
  void agree_on_hierarchy();
  void add_group(int32_t process_set, const std::vector<int32_t>& ranks);
  void remove_group(int32_t process_set);
  HostGroups* host_groups(int32_t process_set, OpType type);
  // allreduce()/allgatherv() of the set's group, in two levels where host_groups() says so.
  void reduce_all(int32_t process_set, Group& g, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                  double postscale);
  void gather_all(int32_t process_set, Group& g, const void* in, void* out, const std::vector<size_t>& bytes);
  bool progress_once();  // one engine pass under progress_mu_; false when nothing moved
  bool drive_until_done(int64_t handle, double timeout_s);  // wait() with waiters_driving_ held
  bool engine_thread_needed();  // by a waiter leaving: is there work it leaves behind?
  bool take_local_requests();
  bool coordinate();
  bool receive_responses();
  void check_health(bool coordinator);
  void execute(const Response& r);
  void execute_allreduce(const Response& r, Group& g);
  // A fused allreduce straight between the tensors (see ScatteredBuffer); false (nothing done)
  // where it must stage through the fusion buffer instead.
  using Entries = std::unordered_map<std::string, TensorRequest>;  // by tensor_key()
  bool execute_allreduce_scattered(const Response& r, Group& g, const std::vector<Entries::iterator>& members,
                                   size_t total, ReduceOp op, double post);
  bool members_alias(const Response& r, const std::vector<Entries::iterator>& members) const;
  void execute_adasum(const Response& r, Group& g);
  void execute_allgather(const Response& r, Group& g);
  void execute_broadcast(const Response& r, Group& g);
  void execute_alltoall(const Response& r, Group& g);
  void execute_reducescatter(const Response& r, Group& g);
  // device_executor.cc: a meta.device response, run by the NCCL data plane.
  void execute_on_device(const Response& r, Group& g);
  void remember_cacheable(const Response& r);
  // engine_tuning.cc: rank 0 scores a cycle that ran `responses` (or `bytes`) and, when autotune
  // moves to another setting, applies it and sends it to every rank; the others take it here.
  void tune_after_cycle(const std::vector<Response>& responses);
  void tune_after_cycle(size_t bytes);
  void take_tuning(WireReader& r);
  bool try_speculate(const TensorRequest& req, int32_t cache_id);
  // Sends req's input early as cache id `cache_id` under the next op number (see Speculation).
  void send_early(const TensorRequest& req, const std::string& key, int32_t cache_id, size_t bytes);
  void note_speculation(int peer, WireReader& r);
  // Whether every peer's next note is spec_'s op (kAll), one has not sent it yet, or one sent another.
  enum class PeerNotes { kNotYet, kAll, kDiffer };
  PeerNotes peers_sent_spec();
  void close_speculation();  // spec_'s op is done on every rank: its notes and op number are used up
  bool complete_speculation();
  // caller_lane.cc (see LaneMemo).
  enum class LaneOutcome { kNotTaken, kDone, kHandedOver };
  LaneOutcome run_in_lane(TensorRequest& req, int64_t* handle);
  LaneOutcome lane_wait_and_finish(TensorRequest& req, int64_t* handle);
  PeerNotes take_lane_notes();
  void hand_over(TensorRequest& req, int64_t* handle);
  bool lane_key_is(const std::string& key) const;
  // complete_speculation() of a broadcast or allgather (entries_ holds req).
  bool complete_data_speculation(const TensorRequest& req);
  void finish(const std::string& key, HandleResult result);
  // finish() with an empty result for each member of a fused allreduce (end(): a rank that
  // joined): one pass under each lock for the whole response.
  void finish_members(const std::vector<Entries::iterator>& members);
  void fail_entry(const std::string& key, HandleError kind, const std::string& msg);
  void fatal(const std::string& msg);
  std::string key_of(int32_t ps, const std::string& name) const { return tensor_key(ps, name); }
  std::string duplicate_name_message(const std::string& name) const;
  void admit_locked(TensorRequest& req, std::string* err, HandleError* kind, std::string* duplicate);
  void wake_engine_thread();

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
  // doorbell rings for every chunk a peer moves, and each ring would wake it for nothing. A
  // leaving waiter rings it only when it leaves work behind (engine_thread_needed), and so does
  // enqueue(): a loop of blocking calls would otherwise wake the engine thread (a futex wake and
  // a context switch on a CPU the ranks need) after every single one. Otherwise it looks again
  // within kParkedTimeoutUs (50 ms), in case a ring was missed. The look is rare because it takes
  // a CPU from a rank that spins in a small collective, and that rank's peer waits too: frequent
  // looks become the slow tail of a small-allreduce loop.
  Doorbell handoff_{};

  std::mutex queue_mu_;  // guards queue_, inflight_, failed_, gone_, process_sets_, hierarchical_
  std::vector<TensorRequest> queue_;
  // Whether queue_ may hold requests: the engine's idle passes read it instead of taking
  // queue_mu_, which a submitting thread needs once per request.
  std::atomic<bool> queued_{false};
  std::atomic<bool> batched_{false};  // the latest requests came through enqueue_batch
  std::unordered_set<std::string> inflight_;
  std::string failed_;
  std::set<int> gone_;
  std::map<int32_t, std::vector<int32_t>> process_sets_;
  std::map<int32_t, std::pair<bool, bool>> hierarchical_;  // by set: (allreduce, allgather) in two levels

  // engine-thread state
  std::vector<TensorRequest> taken_;  // the batch take_local_requests() works on, reused
  Entries entries_;
  std::map<int32_t, std::unique_ptr<Group>> groups_;
  std::map<int32_t, std::unique_ptr<HostGroups>> host_groups_;
  uintptr_t mpi_comm_ = 0;
  std::unique_ptr<gpu::NcclPlane> nccl_;  // made by the first device response
  // Response-cache ids this rank knows, by tensor key; a few signatures per key (the same name
  // used with different shapes or ops), compared field by field: no serialization per request.
  struct KnownRequest {
    RequestMeta meta;
    int32_t id;
  };
  std::unordered_map<std::string, std::vector<KnownRequest>> my_cache_;
  int32_t cached_id(const TensorRequest& req) const;
  std::unordered_map<int32_t, Response> cached_responses_;  // cache id -> single response
  std::vector<uint8_t> fusion_buffer_;
  // Speculative small allreduce, broadcast and allgather. A rank with nothing else in flight whose
  // caller blocks on a cached, small, global one (run()) sends its input to every peer at once
  // (a broadcast's root only; collectives.h: SentEarly) and tells every
  // peer (rank 0 included, for whom it is the request) "cache id X as my op number S". Until X
  // completes, the rank sends no other request (other threads' requests wait in the queue), so
  // the coordinator cannot order anything of this rank's before X, whose data is already on
  // its way. When every rank said the same X and S, each one finishes on its own and the
  // coordinator answers nothing: one hop instead of request, response and data. Otherwise the
  // coordinator's response lists who sent early (Response::presend). S counts executed global-set
  // responses plus speculative completions, which is the same on every rank at the same point of a
  // consistent program.
  struct Speculation {
    bool active = false;
    std::string key;
    int32_t cache_id = -1;
    int64_t seq = -1;
  };
  Speculation spec_;
  // Speculation holds a rank's other requests until its early op completes; with collectives
  // submitted from several threads, in different orders on different ranks, two ranks could
  // each hold what the other waits for. So a process that has submitted from more than one
  // thread does not speculate any more.
  // The caller's lane: a small cached allreduce, broadcast or allgather (into an offered output)
  // of the global set that its caller blocks on (run()), with nothing
  // else in this process in flight or queued, is run start to end by the calling thread, holding
  // progress_mu_: the speculative path (send early, wait for every peer's note, reduce) with no
  // handle, no entry, no in-flight name and no engine pass. Any other message arriving meanwhile
  // (a response, a request, a different note) or a peer slower than a spin hands the request over
  // (hand_over) to the engine's usual bookkeeping, where the speculation continues as if
  // try_speculate had started it. The memo keeps the last request's signature, cache id and key,
  // so that a loop repeating one call looks nothing up.
  struct LaneMemo {
    RequestMeta meta;
    int32_t id = -1;
    std::string key;
    uint64_t cache_version = 0;  // my_cache_version_ when memoised
    std::vector<size_t> gathered;  // an allgather's bytes from each rank (its cached response's)
  };
  LaneMemo lane_memo_;          // written under progress_mu_ and queue_mu_ (lane_key_ points into it)
  uint64_t my_cache_version_ = 0;  // bumped when my_cache_ changes
  // The lane's key while it runs, read by admit_locked (under queue_mu_) to refuse the same name
  // from another thread as a duplicate, as inflight_ would.
  std::atomic<const std::string*> lane_key_{nullptr};
  std::thread::id submitter_{};
  bool several_submitters_ = false;  // guarded by queue_mu_
  std::vector<std::deque<std::pair<int32_t, int64_t>>> peer_specs_;  // (cache id, op number) by peer
  int64_t op_seq_ = 0;
  int64_t last_health_check_us_ = 0, last_stall_check_us_ = 0;
  // Ranks that said goodbye, with when it was seen: their pending work fails after a grace.
  std::vector<std::pair<int, int64_t>> departing_;
  Stats stats_;
  // Rank 0 with HOROVOD_AUTOTUNE, while it searches (from the constructor: a log that cannot be
  // written fails hvd.init() before any rank waits for this one).
  std::unique_ptr<Autotuner> autotuner_{rank_ == 0 && cfg_.autotune ? new Autotuner(cfg_) : nullptr};
  mutable std::mutex tuning_mu_;  // guards tuning_ (read by tuning() from any thread)
  TuningState tuning_{TuningState::configured(cfg_)};
};

}  // namespace hs
