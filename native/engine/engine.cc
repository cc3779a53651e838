#include "engine/engine.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "collectives/collectives.h"
#include "collectives/tuning.h"
#include "common/clock.h"
#include "common/errors.h"
#include "common/reduce.h"
#include "engine/control_kinds.h"
#include "transport/mpi_group.h"

namespace hs {

namespace {
enum RequestTag : uint8_t { kFullRequest = 0, kCachedRequest = 1 };
enum ResponseTag : uint8_t { kFullResponse = 0, kCachedResponses = 1 };
constexpr int kSpinRoundsBeforeSleep = 2000;
// After a batch (enqueue_batch: a whole step's requests at once) nothing more is due soon, and
// staying hot would take turns with the caller's next computation on a host whose cores all work.
constexpr int kSpinRoundsAfterBatch = 200;
constexpr int64_t kWaitSpinUs = 50, kWaitYieldUs = 500;
constexpr int kParkedTimeoutUs = 50000;
}  // namespace

Engine::Engine(int rank, int size, const Config& cfg, const std::string& bind_host)
    : rank_(rank), size_(size), cfg_(cfg), transport_(rank, size, bind_host) {
  std::vector<int32_t> all(size);
  for (int i = 0; i < size; ++i) all[i] = i;
  process_sets_[0] = all;
}

Engine::~Engine() { shutdown(); }

std::unique_ptr<Group> Engine::make_group(const std::vector<int32_t>& ranks) {
  std::vector<int> r(ranks.begin(), ranks.end());
  if (mpi_comm_)
    return std::unique_ptr<Group>(
        new MpiGroup(mpi_comm_, r, &transport_, static_cast<int>(cfg_.data_timeout_seconds * 1000)));
  return std::unique_ptr<Group>(new PeerGroup(&transport_, r));
}

void Engine::start(const std::vector<PeerAddress>& peers, const std::string& job_token, uintptr_t mpi_comm) {
  mpi_comm_ = mpi_comm;
  TransportOptions opt;
  opt.job_token = job_token;
  opt.connect_timeout_ms = static_cast<int>(cfg_.start_timeout_seconds * 1000);
  opt.data_timeout_ms = static_cast<int>(cfg_.data_timeout_seconds * 1000);
  opt.shm_data_ring_bytes = cfg_.shm_ring_bytes;
  opt.shm_single_copy_bytes = cfg_.shm_single_copy_bytes;
  opt.disable_shm = cfg_.shm_disable;
  opt.data_plane_auth = cfg_.data_plane_auth;
  opt.yield_when_idle = cfg_.yield_when_idle;
  transport_.connect(peers, opt);
  agree_on_hierarchy();
  add_group(0, process_sets_[0]);
  peer_specs_.assign(size_, {});
  if (rank_ == 0) coordinator_.reset(new Coordinator(size_, cfg_));
  if (rank_ == 0 && !cfg_.timeline_path.empty()) timeline_.start(cfg_.timeline_path, cfg_.timeline_mark_cycles);
  thread_ = std::thread([this] { loop(); });
}

void Engine::shutdown() {
  stop_ = true;
  if (thread_.joinable()) {
    transport_.notify_self();
    doorbell_ring(&handoff_);
    thread_.join();
  }
  // Threads in wait() or run() drive the engine too, and sleep on the transport's doorbell: wake
  // them, and let each leave (one inside a pass finishes it, at worst bounded by the data timeout)
  // before the entries and the links go. They count themselves in waiters_driving_ before they look
  // at stop_, so a thread that saw stop_ unset is waited for here.
  transport_.notify_self();
  while (waiters_driving_.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  std::lock_guard<std::mutex> no_pass(progress_mu_);  // (a leaving waiter may still look, under it)
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    if (failed_.empty()) failed_ = "horovod_spark has been shut down; call hvd.init() first";
  }
  for (auto& kv : entries_) handles_.fail(kv.second.handle, HandleError::kInternal, failed_);
  entries_.clear();
  for (auto& q : queue_) handles_.fail(q.handle, HandleError::kInternal, failed_);
  queue_.clear();
  timeline_.stop();
  transport_.close();
}

bool Engine::process_set_ranks(int32_t id, std::vector<int32_t>* ranks) {
  std::lock_guard<std::mutex> l(queue_mu_);
  auto it = process_sets_.find(id);
  if (it == process_sets_.end()) return false;
  *ranks = it->second;
  return true;
}

std::vector<int32_t> Engine::process_set_ids() {
  std::lock_guard<std::mutex> l(queue_mu_);
  std::vector<int32_t> ids;
  for (auto& kv : process_sets_) ids.push_back(kv.first);
  return ids;
}

bool Engine::progress_once() {
  if (dead_) return false;
  bool progress = false;
  try {
    progress |= transport_.progress_control();
    progress |= take_local_requests();
    progress |= rank_ == 0 ? coordinate() : receive_responses();
    progress |= complete_speculation();
    progress |= transport_.progress_control();
    check_health(rank_ == 0);
  } catch (const TransportError& e) {
    dead_ = true;
    fatal(transport_.explain(e.what()));
  } catch (const std::exception& e) {
    dead_ = true;
    fatal(std::string("internal error in the collective engine: ") + e.what());
  }
  return progress;
}

void Engine::loop() {
  int idle_rounds = 0;
  while (!stop_ && !dead_) {
    uint32_t handoff = handoff_.seq.load();
    if (waiters_driving_.load() > 0) {
      // A framework thread is running the engine from wait(); stay off the CPU until it leaves
      // (it rings handoff_), looking again now and then in case that ring is missed.
      doorbell_wait(&handoff_, handoff, kParkedTimeoutUs);
      continue;
    }
    uint32_t token = transport_.activity_token();
    if (!progress_mu_.try_lock()) {
      doorbell_wait(&handoff_, handoff, 200);  // a waiter is running the engine right now
      continue;
    }
    bool progress = progress_once();
    progress_mu_.unlock();
    if (progress) {
      idle_rounds = 0;
      continue;
    }
    // Stay hot briefly after work (the next step's tensors usually follow at once), then sleep
    // on the doorbell so an idle rank costs no CPU.
    if (++idle_rounds < (batched_.load(std::memory_order_relaxed) ? kSpinRoundsAfterBatch : kSpinRoundsBeforeSleep)) {
      if (idle_rounds > 200 || transport_.oversubscribed()) sched_yield();
      continue;
    }
    transport_.wait_for_activity(token, static_cast<int>(std::max(1.0, cfg_.cycle_time_ms * 1000)));
  }
}

bool Engine::wait(int64_t handle, double timeout_s) {
  // Most waits in a batch find their handle already done (one fused response completes many):
  // answer those without touching the engine or waking its thread.
  if (handles_.poll(handle)) return true;
  waiters_driving_++;
  return drive_until_done(handle, timeout_s);
}

bool Engine::run(TensorRequest req, double timeout_s, int64_t* handle) {
  req.caller_waits = true;
  waiters_driving_++;  // before the request exists, so the engine thread never takes it
  switch (run_in_lane(req, handle)) {
    case LaneOutcome::kDone:
      *handle = kRanByCaller;
      waiters_driving_--;
      if (engine_thread_needed()) doorbell_ring(&handoff_);
      return true;
    case LaneOutcome::kHandedOver: return drive_until_done(*handle, timeout_s);
    case LaneOutcome::kNotTaken: break;
  }
  try {
    *handle = enqueue(std::move(req), false);
  } catch (...) {  // refused (a duplicate name): nothing to drive
    waiters_driving_--;
    if (engine_thread_needed()) doorbell_ring(&handoff_);
    throw;
  }
  return drive_until_done(*handle, timeout_s);
}

bool Engine::drive_until_done(int64_t handle, double timeout_s) {
  // Deadlines on the coarse clock (milliseconds are plenty); spin timing on the fine one, read
  // only while idle.
  const int64_t deadline_us = timeout_s < 0 ? INT64_MAX : coarse_now_us() + static_cast<int64_t>(timeout_s * 1e6);
  auto left_s = [&] { return std::max(0.0, (deadline_us - coarse_now_us()) * 1e-6); };
  auto expired = [&] { return timeout_s >= 0 && coarse_now_us() >= deadline_us; };
  int idle = 0;
  int64_t idle_since = 0;
  // Only a pass that moved something (ours, or another thread's while we could not run one) can
  // have completed the handle: idle rounds skip the look-up under the table's lock.
  bool maybe_done = true, done = false;
  while (!(maybe_done && (done = handles_.poll(handle)))) {
    maybe_done = false;
    if (expired()) break;
    if (dead_ || stop_) break;
    uint32_t token = transport_.activity_token();
    if (!progress_mu_.try_lock()) {
      // Someone else is running the engine: a short pass usually ends within microseconds; a long
      // collective does not, so after a few yields sleep on the handle instead.
      maybe_done = true;
      if (++idle < 64) {
        sched_yield();
        continue;
      }
      if (handles_.wait(handle, timeout_s < 0 ? 0.001 : std::min(0.001, left_s()))) {
        done = true;
        break;
      }
      continue;
    }
    bool progress = progress_once();
    progress_mu_.unlock();
    if (progress) {
      idle = 0;
      idle_since = 0;
      maybe_done = true;
      continue;
    }
    // As in an exchange: spin while every rank has its own CPU, then yield, then sleep.
    int64_t now = Timeline::now_us();
    if (idle_since == 0) idle_since = now;
    if (!transport_.oversubscribed() && now - idle_since < kWaitSpinUs) continue;
    maybe_done = true;  // (now and then regardless: cheap next to a yield or a sleep)
    if (now - idle_since < kWaitYieldUs) {
      sched_yield();
      continue;
    }
    transport_.wait_for_activity(token, 1000);
  }
  waiters_driving_--;
  if (engine_thread_needed()) doorbell_ring(&handoff_);  // hand the engine back
  if (done) return true;
  if (expired()) return handles_.poll(handle);
  return handles_.wait(handle, timeout_s < 0 ? -1.0 : left_s());
}

bool Engine::engine_thread_needed() {
  if (waiters_driving_.load() > 0) return false;  // another waiter drives; it asks on leaving
  if (!progress_mu_.try_lock()) return true;
  bool needed = !entries_.empty() || spec_.active || transport_.has_unsent_control() ||
                (coordinator_ && coordinator_->has_work_without(rank_));
  progress_mu_.unlock();
  if (needed) return true;
  std::lock_guard<std::mutex> l(queue_mu_);
  return !queue_.empty();
}

bool Engine::take_local_requests() {
  if (spec_.active) return false;  // see Speculation: nothing may overtake the early-sent input
  std::vector<TensorRequest>& batch = taken_;
  batch.clear();
  if (!queued_.load(std::memory_order_acquire)) return false;
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    queued_.store(false, std::memory_order_relaxed);
    if (queue_.empty()) return false;
    batch.swap(queue_);  // queue_ keeps the capacity of the batch before: no regrowth per burst
  }
  WireWriter w;
  w.put<uint8_t>(kRequests);
  w.put<uint32_t>(static_cast<uint32_t>(batch.size()));
  bool sent_early = false;
  for (auto& req : batch) {
    const RequestMeta& m = req.meta;
    if (timeline_.active()) {
      timeline_.begin(m.name, "QUEUE", req.enqueued_us);
      timeline_.end(m.name);
      timeline_.begin(m.name, std::string("NEGOTIATE_") + op_type_name(m.type));
    }
    int32_t cache_id = my_cache_.empty() ? -1 : cached_id(req);
    (cache_id >= 0 ? stats_.requests_cached : stats_.requests_full)++;
    // A lone blocking request may go out early (see Speculation).
    sent_early = batch.size() == 1 && req.caller_waits && cache_id >= 0 && try_speculate(req, cache_id);
    if (sent_early) {
      // try_speculate told every peer, rank 0 included: that note is the request.
    } else if (rank_ == 0) {
      coordinator_->add_request(0, m, cache_id);
    } else if (cache_id >= 0) {
      w.put<uint8_t>(kCachedRequest);
      w.put<int32_t>(cache_id);
    } else {
      w.put<uint8_t>(kFullRequest);
      m.write(w);
    }
    std::string key = req.key;  // (copied before req moves into the entry)
    entries_.insert_or_assign(std::move(key), std::move(req));
  }
  batch.clear();
  if (rank_ != 0 && !sent_early) transport_.post_control(0, w.take());
  return true;
}

int32_t Engine::cached_id(const TensorRequest& req) const {
  auto it = my_cache_.find(req.key);
  if (it == my_cache_.end()) return -1;
  for (const KnownRequest& known : it->second)
    if (known.meta.same_signature(req.meta)) return known.id;
  return -1;
}

bool Engine::coordinate() {
  bool progress = false;
  std::string msg;
  for (int p = 1; p < size_; ++p) {
    while (transport_.pop_control(p, &msg)) {
      progress = true;
      WireReader r(msg);
      if (r.get<uint8_t>() == kSpeculation) {
        note_speculation(p, r);
        continue;
      }
      uint32_t n = r.get<uint32_t>();
      for (uint32_t i = 0; i < n; ++i) {
        if (r.get<uint8_t>() == kCachedRequest) {
          int32_t id = r.get<int32_t>();
          const RequestMeta* m = coordinator_->cached_request(id);
          if (!m) throw std::runtime_error("rank " + std::to_string(p) + " sent unknown cache id");
          coordinator_->add_request(p, *m, id);
        } else {
          coordinator_->add_request(p, RequestMeta::read(r), -1);
        }
      }
    }
  }
  std::vector<Response> responses;
  if (coordinator_->has_ready()) responses = coordinator_->take_ready();
  int64_t now = coarse_now_us();
  if (now - last_stall_check_us_ > 1000000) {
    last_stall_check_us_ = now;
    coordinator_->check_stalls(&responses);
  }
  if (responses.empty()) return progress;
  timeline_.mark_cycle();
  WireWriter w;
  w.put<uint8_t>(kResponses);
  w.put<uint32_t>(static_cast<uint32_t>(responses.size()));
  for (const Response& resp : responses) {
    if (resp.all_cached) {
      w.put<uint8_t>(kCachedResponses);
      w.put_vec(resp.cache_ids);
    } else {
      w.put<uint8_t>(kFullResponse);
      resp.write(w);
    }
  }
  std::string encoded = w.take();
  for (int p = 1; p < size_; ++p) transport_.post_control(p, encoded);
  transport_.progress_control();  // peers must see the order before we block in a collective
  for (const Response& resp : responses) execute(resp);
  if (autotuner_) tune_after_cycle(responses);
  return true;
}

bool Engine::receive_responses() {
  bool progress = false;
  std::string msg;
  // Other ranks send only speculation notes here; rank 0 sends those and the responses.
  for (int p = 1; p < size_; ++p) {
    if (p == rank_) continue;
    while (transport_.pop_control(p, &msg)) {
      progress = true;
      WireReader r(msg);
      if (r.get<uint8_t>() != kSpeculation) throw std::runtime_error("unexpected control message");
      note_speculation(p, r);
    }
  }
  while (transport_.pop_control(0, &msg)) {
    progress = true;
    WireReader r(msg);
    const uint8_t kind = r.get<uint8_t>();
    if (kind == kSpeculation || kind == kTuningMessage) {
      kind == kSpeculation ? note_speculation(0, r) : take_tuning(r);
      continue;
    }
    uint32_t n = r.get<uint32_t>();
    for (uint32_t i = 0; i < n; ++i) {
      if (r.get<uint8_t>() == kCachedResponses) {
        std::vector<int32_t> ids = r.get_vec<int32_t>();
        Response fused = cached_responses_.at(ids[0]);
        fused.names.reserve(ids.size());
        fused.shapes.reserve(ids.size());
        fused.cache_ids.reserve(ids.size());
        for (size_t j = 1; j < ids.size(); ++j) {
          const Response& part = cached_responses_.at(ids[j]);
          fused.names.push_back(part.names[0]);
          fused.shapes.push_back(part.shapes[0]);
          fused.cache_ids.push_back(ids[j]);
        }
        fused.all_cached = true;
        execute(fused);
      } else {
        execute(Response::read(r));
      }
    }
  }
  return progress;
}

void Engine::check_health(bool coordinator) {
  int64_t now = coarse_now_us();
  if (now - last_health_check_us_ < 20000) return;
  last_health_check_us_ = now;
  (void)coordinator;
  std::vector<int> gone;
  std::vector<int> dead = transport_.check_peers(&gone);
  if (!dead.empty()) {
    std::string who;
    for (int d : dead) who += (who.empty() ? "" : ", ") + transport_.describe(d) + " " + transport_.fate(d);
    throw TransportError(who + "; collectives cannot continue");
  }
  for (int g : gone) {
    std::lock_guard<std::mutex> l(queue_mu_);
    gone_.insert(g);  // new requests that need it are refused from now on
    departing_.emplace_back(g, now);
  }
  // What a rank sent before its goodbye (the response that completes a last collective, say)
  // travels on other links than the goodbye and may land after it: pending work waits out a grace,
  // during which this loop keeps taking responses, before it is failed.
  constexpr int64_t kDepartureGraceUs = 500000;
  gone.clear();
  for (auto it = departing_.begin(); it != departing_.end();) {
    if (now - it->second < kDepartureGraceUs) {
      ++it;
      continue;
    }
    gone.push_back(it->first);
    it = departing_.erase(it);
  }
  // Pending tensors that need a rank that left can never complete.
  std::vector<std::string> doomed;
  for (auto& kv : entries_) {
    // find, not operator[]: other threads read process_sets_ in enqueue() (under queue_mu_, which
    // this thread does not hold), and a set removed while its tensor was in flight must not come
    // back as an empty set.
    const auto ps = process_sets_.find(kv.second.meta.process_set);
    auto needs = [&](int g) {
      return g == 0 ||
             (ps != process_sets_.end() && std::find(ps->second.begin(), ps->second.end(), g) != ps->second.end());
    };
    if (std::any_of(gone.begin(), gone.end(), needs)) doomed.push_back(kv.first);
  }
  for (const auto& k : doomed)
    if (entries_.count(k))
      fail_entry(k, HandleError::kInternal,
                 std::string(op_type_name(entries_[k].meta.type)) + " of '" + entries_[k].meta.name +
                     "' cannot complete: " + transport_.describe(gone[0]) + " has shut down");
}

}  // namespace hs
