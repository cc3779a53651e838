// Runs real hs::Engines as the ranks of a job inside one process: one thread per rank, each with
// its own Engine, Transport and engine thread, connected over loopback TCP and shared memory as
// the host ids say. Everything below the Python binding runs as in production (negotiation, the
// response cache and its lane, fusion, speculation, process sets, join, failure handling), which
// makes these tests the natural target for ThreadSanitizer and AddressSanitizer.
//
// Checks never throw: a failed check is counted and printed with its rank, and the scenario goes
// on, so every rank still reaches the collectives its peers wait for. Every wait is bounded; a
// watchdog ends the process if a scenario overruns, so a deadlock fails instead of hanging.
#pragma once
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "engine/engine.h"

namespace hs_test {

// Seconds a single collective may take before the test calls it stuck (sanitizers slow the
// engine down 5-20x on a small machine; a healthy collective here takes milliseconds).
constexpr double kWaitSeconds = 60;

inline std::atomic<int>& failures() {
  static std::atomic<int> n{0};
  return n;
}
inline std::atomic<long>& checks() {
  static std::atomic<long> n{0};
  return n;
}

inline bool expect(bool ok, int rank, const std::string& what) {
  checks()++;
  if (!ok && ++failures() <= 50) std::fprintf(stderr, "FAIL (rank %d): %s\n", rank, what.c_str());
  return ok;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Settings for tests: short start and data timeouts (a broken test fails in a minute, not ten),
// small shared-memory rings (so transfers wrap around them), stall warnings off unless asked for.
inline hs::Config test_config() {
  hs::Config c;
  c.start_timeout_seconds = 30;
  c.data_timeout_seconds = kWaitSeconds;
  c.shm_ring_bytes = size_t(256) << 10;
  c.stall_check_disable = true;
  return c;
}

// A completed handle, taken out of the table.
struct Outcome {
  bool done = false;  // false: it did not complete within kWaitSeconds
  hs::HandleError kind = hs::HandleError::kNone;
  std::string message;
  hs::HandleResult result;
  bool ok() const { return done && kind == hs::HandleError::kNone; }
};

// One rank's view: its engine plus helpers that build requests as the Python layer does.
class Rank {
 public:
  Rank(hs::Engine& e, int rank, int size) : e_(e), rank_(rank), size_(size) {}
  hs::Engine& engine() { return e_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool expect(bool ok, const std::string& what) { return hs_test::expect(ok, rank_, what); }

  static hs::TensorRequest request(hs::OpType type, const std::string& name, const void* in, void* out,
                                   hs::DataType dtype, std::vector<int64_t> shape, int32_t process_set = 0) {
    hs::TensorRequest req;
    req.meta.type = type;
    req.meta.name = name;
    req.meta.dtype = dtype;
    req.meta.shape = std::move(shape);
    req.meta.process_set = process_set;
    req.in = in;
    req.out = out;
    return req;
  }
  int64_t submit(hs::TensorRequest req) { return e_.enqueue(std::move(req)); }
  Outcome wait(int64_t handle) {
    Outcome o;
    o.done = e_.wait(handle, kWaitSeconds);
    if (!expect(o.done, "handle " + std::to_string(handle) + " did not complete in time")) return o;
    o.result = e_.handles().take(handle, &o.kind, &o.message);
    return o;
  }
  Outcome run(hs::TensorRequest req) { return wait(submit(std::move(req))); }
  // Engine::run: the caller blocks at once (the path that may send a small allreduce early).
  Outcome run_blocking(hs::TensorRequest req) {
    int64_t h = 0;
    Outcome o;
    o.done = e_.run(std::move(req), kWaitSeconds, &h);
    if (!expect(o.done, "blocking run did not complete in time")) return o;
    if (h == hs::Engine::kRanByCaller) return o;  // (the caller's lane: done, nothing to take)
    o.result = e_.handles().take(h, &o.kind, &o.message);
    return o;
  }
  // Expects success; names the operation in the failure.
  bool succeeded(const Outcome& o, const std::string& what) {
    return expect(o.ok(), what + " failed: " + (o.done ? o.message : "timed out"));
  }
  // Expects a collective error whose message holds every one of `parts`.
  bool failed_with(const Outcome& o, const std::vector<std::string>& parts, const std::string& what) {
    if (!expect(o.done && o.kind != hs::HandleError::kNone, what + " should have failed but succeeded")) return false;
    for (const auto& p : parts)
      if (!expect(contains(o.message, p), what + ": error '" + o.message + "' does not mention '" + p + "'"))
        return false;
    return true;
  }

  // Waits until every rank's thread got here (a test-side barrier, not a collective).
  void sync();

 private:
  friend class Job;
  hs::Engine& e_;
  int rank_, size_;
  class Job* job_ = nullptr;
};

class Job {
 public:
  // One rank per host id; equal ids share memory, different ids talk TCP.
  Job(std::vector<std::string> host_ids, hs::Config cfg = test_config()) : host_ids_(std::move(host_ids)), cfg_(cfg) {}

  // Runs body(rank) on every rank, then shuts each engine down after all bodies returned.
  void run(const std::function<void(Rank&)>& body) {
    const int n = static_cast<int>(host_ids_.size());
    static std::atomic<int> job_counter{0};
    const std::string token = "tst" + std::to_string(::getpid()) + "x" + std::to_string(job_counter++);
    std::vector<std::unique_ptr<hs::Engine>> engines;
    std::vector<hs::PeerAddress> peers;
    for (int r = 0; r < n; ++r) {
      engines.emplace_back(new hs::Engine(r, n, cfg_));
      peers.push_back({"127.0.0.1", engines.back()->listen_port(), host_ids_[size_t(r)]});
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        hs::Engine& e = *engines[size_t(r)];
        Rank rank(e, r, n);
        rank.job_ = this;
        try {
          e.start(peers, token);
          body(rank);
        } catch (const std::exception& ex) {
          expect(false, r, std::string("threw: ") + ex.what());
        }
        rank.sync();  // nobody says goodbye while a peer still needs it
        e.shutdown();
      });
    }
    for (auto& t : threads) t.join();
  }

  // Waits until `size` threads arrived (bounded: a rank stuck elsewhere fails the check instead).
  void sync(int rank) {
    std::unique_lock<std::mutex> l(mu_);
    const long round = round_;
    if (++arrived_ == static_cast<int>(host_ids_.size())) {
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(l, std::chrono::duration<double>(kWaitSeconds), [&] { return round_ != round; }))
      expect(false, rank, "the other ranks never reached the test's sync point");
  }

 private:
  std::vector<std::string> host_ids_;
  hs::Config cfg_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  long round_ = 0;
};

inline void Rank::sync() { job_->sync(rank_); }

// Ends the process if the scenario is still running after `seconds`: a hang is a failure too.
class Watchdog {
 public:
  Watchdog(const std::string& what, int seconds) : what_(what) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> l(mu_);
      if (!cv_.wait_for(l, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "FAIL: %s still running after %d s (deadlock?)\n", what_.c_str(), seconds);
        std::fflush(stderr);
        std::_Exit(3);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Typed views of result bytes.
template <class T, class Bytes>
std::vector<T> as(const Bytes& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

// Topologies the scenarios run on: every rank on one host (shared memory), every rank on its own
// host (TCP), and two hosts of two ranks (both, as in a small cluster).
struct Topology {
  const char* name;
  std::vector<std::string> host_ids;
};
inline const std::vector<Topology>& topologies() {
  static const std::vector<Topology> t = {
      {"shm x3", {"h", "h", "h"}},
      {"tcp x3", {"a", "b", "c"}},
      {"2 hosts x2", {"a", "a", "b", "b"}},
  };
  return t;
}

}  // namespace hs_test
