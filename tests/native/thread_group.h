// An in-process hs::Group for tests: N threads in one process, one per rank.
//
// It is deliberately adversarial, so that collectives which work here do not depend on anything
// Group::exchange does not promise:
// - sends and receives of one exchange() really run concurrently: sends are posted first and
//   only waited for after every receive has completed;
// - large messages are rendezvous (the receiver reads the sender's buffer while the sender is
//   inside exchange(), as a shared-memory transport does), small ones are eager (copied, the
//   sender moves on), so several messages can be queued on one ordered pair;
// - data is delivered in chunks of odd sizes (odd element counts for kReduce), so chunk-boundary
//   bugs in reductions show up;
// - contract violations (two sends to one peer in one call, a receive buffer that overlaps a send
//   buffer or another receive, size mismatches between sender and receiver) throw at once, and a
//   stuck rank fails the whole world after a timeout instead of hanging the test.
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/reduce.h"
#include "transport/group.h"

namespace hs_test {

class World {
 public:
  explicit World(int n);
  int size() const { return n_; }
  // Marks the world failed (first reason wins) and wakes every waiting rank.
  void fail(const std::string& why);
  std::string failure();

 private:
  friend class ThreadGroup;
  struct Message {
    const char* data = nullptr;
    size_t bytes = 0;
    size_t taken = 0;
    bool done = false;
    std::vector<char> eager_copy;
  };
  std::deque<std::shared_ptr<Message>>& box(int from, int to) { return boxes_[size_t(from * n_ + to)]; }

  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<std::shared_ptr<Message>>> boxes_;
  bool failed_ = false;
  std::string failure_;
};

class ThreadGroup : public hs::Group {
 public:
  ThreadGroup(World& world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  int global_rank(int index) const override { return index; }
  void exchange(const std::vector<hs::SendSpec>& sends, const std::vector<hs::RecvSpec>& recvs) override;
  size_t exchanges() const { return exchanges_; }

 private:
  void validate(const std::vector<hs::SendSpec>& sends, const std::vector<hs::RecvSpec>& recvs);
  void wait(std::unique_lock<std::mutex>& lk, const char* what);

  World& world_;
  int rank_;
  size_t exchanges_ = 0;
};

// ---- implementation (header-only so the test builds from a single .cc) ----

namespace detail {

// Messages up to this size are copied at send time (eager); larger ones are read in place.
constexpr size_t kEagerBytes = 512;
// A rank that waits this long is assumed deadlocked.
constexpr auto kTimeout = std::chrono::seconds(20);
// Chunk sizes, in elements (kReduce) or bytes (kCopy), cycled per receive: odd on purpose.
constexpr size_t kChunks[] = {1, 3, 7, 13, 31, 127, 509, 1021, 4093, 2047, 8191, 5};

inline bool overlap(const void* a, size_t an, const void* b, size_t bn) {
  if (an == 0 || bn == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bn && y < x + an;
}

}  // namespace detail

inline World::World(int n) : n_(n), boxes_(size_t(n * n)) {}

inline void World::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!failed_) {
      failed_ = true;
      failure_ = why;
    }
  }
  cv_.notify_all();
}

inline std::string World::failure() {
  std::lock_guard<std::mutex> lk(mu_);
  return failure_;
}

inline void ThreadGroup::validate(const std::vector<hs::SendSpec>& sends, const std::vector<hs::RecvSpec>& recvs) {
  const int n = size();
  auto violation = [&](const std::string& what) {
    throw std::logic_error("rank " + std::to_string(rank_) + ": Group contract violation: " + what);
  };
  std::vector<int> send_to(size_t(n), 0), recv_from(size_t(n), 0);
  for (const auto& s : sends) {
    if (s.peer < 0 || s.peer >= n || s.peer == rank_) violation("send to peer " + std::to_string(s.peer));
    if (++send_to[size_t(s.peer)] > 1) violation("two sends to peer " + std::to_string(s.peer));
    if (s.data == nullptr && s.bytes > 0) violation("null send buffer");
  }
  for (size_t i = 0; i < recvs.size(); ++i) {
    const auto& r = recvs[i];
    if (r.peer < 0 || r.peer >= n || r.peer == rank_) violation("recv from peer " + std::to_string(r.peer));
    if (++recv_from[size_t(r.peer)] > 1) violation("two recvs from peer " + std::to_string(r.peer));
    if (r.dest == nullptr && r.bytes > 0) violation("null recv buffer");
    if (r.mode == hs::RecvMode::kReduce) {
      if (r.local == nullptr && r.bytes > 0) violation("kReduce without local");
      if (r.bytes % hs::dtype_size(r.dtype) != 0) violation("kReduce bytes not element-aligned");
    }
    for (const auto& s : sends) {
      if (detail::overlap(r.dest, r.bytes, s.data, s.bytes)) {
        violation("recv from " + std::to_string(r.peer) + " writes into the buffer sent to " + std::to_string(s.peer));
      }
    }
    for (size_t j = 0; j < recvs.size(); ++j) {
      if (j == i) continue;
      if (detail::overlap(r.dest, r.bytes, recvs[j].dest, recvs[j].bytes)) violation("overlapping recvs");
      if (recvs[j].mode == hs::RecvMode::kReduce && recvs[j].local != recvs[j].dest &&
          detail::overlap(r.dest, r.bytes, recvs[j].local, recvs[j].bytes)) {
        violation("recv overwrites another recv's kReduce local input");
      }
    }
  }
}

inline void ThreadGroup::wait(std::unique_lock<std::mutex>& lk, const char* what) {
  if (world_.failed_) throw hs::TransportError("rank " + std::to_string(rank_) + ": world failed");
  if (world_.cv_.wait_for(lk, detail::kTimeout) == std::cv_status::timeout) {
    const std::string why = "rank " + std::to_string(rank_) + " timed out waiting to " + what +
                            " (deadlock?) in exchange #" + std::to_string(exchanges_);
    world_.failed_ = true;
    if (world_.failure_.empty()) world_.failure_ = why;
    world_.cv_.notify_all();
    throw hs::TransportError(why);
  }
  if (world_.failed_) throw hs::TransportError("rank " + std::to_string(rank_) + ": world failed");
}

inline void ThreadGroup::exchange(const std::vector<hs::SendSpec>& sends, const std::vector<hs::RecvSpec>& recvs) {
  ++exchanges_;
  validate(sends, recvs);
  std::vector<std::shared_ptr<World::Message>> rendezvous;
  std::unique_lock<std::mutex> lk(world_.mu_);
  for (const auto& s : sends) {
    auto m = std::make_shared<World::Message>();
    m->bytes = s.bytes;
    const char* p = static_cast<const char*>(s.data);
    if (s.bytes <= detail::kEagerBytes) {
      m->eager_copy.assign(p, p + s.bytes);
      m->data = m->eager_copy.data();
      m->done = true;  // the sender does not wait for an eager message
    } else {
      m->data = p;
      rendezvous.push_back(m);
    }
    world_.box(rank_, s.peer).push_back(m);
  }
  world_.cv_.notify_all();

  struct Pending {
    const hs::RecvSpec* spec;
    size_t chunk_index;
    bool done;
  };
  std::vector<Pending> pending;
  for (size_t i = 0; i < recvs.size(); ++i) pending.push_back({&recvs[i], size_t(rank_) + i, false});
  size_t open = pending.size();
  while (open > 0) {
    bool progressed = false;
    for (auto& p : pending) {
      if (p.done) continue;
      auto& box = world_.box(p.spec->peer, rank_);
      if (box.empty()) continue;
      const std::shared_ptr<World::Message> m = box.front();
      if (m->bytes != p.spec->bytes) {
        const std::string why = "rank " + std::to_string(rank_) + " expects " + std::to_string(p.spec->bytes) +
                                " bytes from rank " + std::to_string(p.spec->peer) + " but the message has " +
                                std::to_string(m->bytes);
        world_.failed_ = true;
        if (world_.failure_.empty()) world_.failure_ = why;
        world_.cv_.notify_all();
        throw std::logic_error(why);
      }
      const bool reduce = p.spec->mode == hs::RecvMode::kReduce;
      const size_t unit = reduce ? hs::dtype_size(p.spec->dtype) : 1;
      constexpr size_t kNumChunks = sizeof detail::kChunks / sizeof detail::kChunks[0];
      const size_t want = detail::kChunks[p.chunk_index++ % kNumChunks] * unit;
      const size_t off = m->taken;
      const size_t len = std::min(want, m->bytes - off);
      // Work on the data without the lock, like a transport copying out of its ring buffer.
      lk.unlock();
      char* dest = static_cast<char*>(p.spec->dest) + off;
      if (len > 0 && reduce) {
        const char* local = static_cast<const char*>(p.spec->local) + off;
        if (p.spec->incoming_first)
          hs::reduce_buffers(dest, m->data + off, local, len / unit, p.spec->dtype, p.spec->op);
        else hs::reduce_buffers(dest, local, m->data + off, len / unit, p.spec->dtype, p.spec->op);
        hs::scale_buffer(dest, len / unit, p.spec->dtype, p.spec->postscale);
      } else if (len > 0) {
        std::memcpy(dest, m->data + off, len);
      }
      lk.lock();
      m->taken += len;
      if (m->taken == m->bytes) {
        box.pop_front();
        m->done = true;
        p.done = true;
        --open;
        world_.cv_.notify_all();
      }
      progressed = true;
    }
    if (!progressed && open > 0) wait(lk, "receive");
  }
  for (const auto& m : rendezvous) {
    while (!m->done) wait(lk, "have a send consumed");
  }
}

}  // namespace hs_test
