// Executing a negotiated response on this rank: lay tensors out (fusion buffer, zero inputs for a
// rank that joined), call the collective algorithm, hand results to the handles.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/tuning.h"
#include "common/errors.h"
#include "common/reduce.h"
#include "engine/engine.h"

namespace hs {

namespace {
size_t row_bytes(const std::vector<int64_t>& shape, DataType dt) {
  size_t n = dtype_size(dt);
  for (size_t i = 1; i < shape.size(); ++i) n *= static_cast<size_t>(shape[i]);
  return n;
}
size_t elements(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}
// Calls f(in, out, bytes, offset) for each contiguous, non-empty piece of a request's `bytes` of
// data: the members of a packed group, or its one input/output pair. Empty pieces are skipped: their
// pointers may be null (an empty array's), which memcpy must not be given even for zero bytes.
template <class F>
void for_each_piece(const TensorRequest& req, size_t bytes, F&& f) {
  if (req.members.empty()) {
    if (bytes > 0) f(req.in, req.out, bytes, size_t(0));
    return;
  }
  size_t at = 0;
  for (const PackedMember& m : req.members) {
    if (at + m.bytes > bytes) throw CollectiveError("internal: a packed group's members overflow it");
    if (m.bytes > 0) f(m.in, m.out, m.bytes, at);
    at += m.bytes;
  }
}

// What of this collective went out before its response (Response::presend), for this rank.
SentEarly sent_early(const Response& r, int me) {
  if (r.presend.empty()) return SentEarly::kNone;
  return std::find(r.presend.begin(), r.presend.end(), me) != r.presend.end() ? SentEarly::kByThisRank
                                                                              : SentEarly::kByOthers;
}

// Where a result of `bytes` goes: the buffer the caller offered when it has exactly that size,
// else memory of the result's own (res->has_data). req: null for a rank that joined.
uint8_t* result_memory(const TensorRequest* req, size_t bytes, HandleResult* res) {
  if (req && req->out && req->out_bytes == bytes && bytes > 0) return static_cast<uint8_t*>(req->out);
  res->data.resize(bytes);
  res->has_data = true;
  return res->data.data();
}
}  // namespace

void Engine::remember_cacheable(const Response& r) {
  for (size_t i = 0; i < r.cache_ids.size() && i < r.names.size(); ++i) {
    int32_t id = r.cache_ids[i];
    if (id < 0 || cached_responses_.count(id)) continue;
    Response single = r;
    single.names = {r.names[i]};
    single.shapes = {r.shapes[i]};
    single.cache_ids = {id};
    single.all_cached = false;
    single.presend.clear();  // who sent early belongs to that one round, not to the cache
    single.presend_bytes.clear();
    cached_responses_[id] = single;
    auto it = entries_.find(key_of(r.process_set, r.names[i]));
    if (it != entries_.end()) {
      auto& known = my_cache_[it->first];
      const RequestMeta& meta = it->second.meta;
      bool present = false;
      for (const auto& k : known) present = present || k.meta.same_signature(meta);
      if (!present) {
        if (known.size() >= 4) known.erase(known.begin());  // a name used many ways: keep the latest
        known.push_back(KnownRequest{meta, id});
        my_cache_version_++;
      }
    }
  }
}

void Engine::execute(const Response& r) {
  // Only the global set counts: every rank takes part in each of its ops, so a rank with nothing
  // in flight has executed exactly the same ones as every other such rank. Responses for other
  // sets reach non-members whenever they arrive, which would make the count drift.
  if (r.process_set == 0) op_seq_++;
  if (spec_.active)
    for (const auto& n : r.names)
      if (spec_.key == key_of(r.process_set, n)) spec_.active = false;  // answered the slow way
  stats_.responses++;
  if (r.all_cached) stats_.responses_cached++;
  if (r.names.size() > 1) stats_.fused_tensors += static_cast<int64_t>(r.names.size());
  if (r.type == OpType::kJoin) {
    HandleResult res;
    res.value = r.value;
    finish(key_of(0, "join"), std::move(res));
    return;
  }
  if (r.type == OpType::kAddProcessSet || r.type == OpType::kRemoveProcessSet) {
    std::string key = key_of(0, r.names[0]);
    if (!r.error.empty()) return fail_entry(key, HandleError::kCollective, r.error);
    {
      std::lock_guard<std::mutex> l(queue_mu_);
      if (r.type == OpType::kAddProcessSet) process_sets_[r.value] = r.ranks;
      else process_sets_.erase(r.value);
    }
    if (r.type == OpType::kAddProcessSet && std::find(r.ranks.begin(), r.ranks.end(), rank_) != r.ranks.end())
      add_group(r.value, r.ranks);
    if (r.type == OpType::kRemoveProcessSet) remove_group(r.value);
    HandleResult res;
    res.value = r.value;
    return finish(key, std::move(res));
  }
  // Remembered even by ranks outside the process set: later compact (all-cached) responses name
  // it by cache id, and every rank must be able to decode them.
  if (r.error.empty()) remember_cacheable(r);
  auto git = groups_.find(r.process_set);
  if (git == groups_.end()) return;  // not a member: nothing of ours is in it
  if (!r.error.empty()) {
    // Inputs sent early for this failed collective are still in the links: drain them, or the
    // next collective would read them as its own data.
    Group& g = *git->second;
    for (size_t i = 0; i < r.presend.size(); ++i)
      if (r.presend[i] != rank_) discard_sent_input(g, r.presend[i], static_cast<size_t>(r.presend_bytes[i]));
    for (const auto& n : r.names) fail_entry(key_of(r.process_set, n), HandleError::kCollective, r.error);
    return;
  }
  if (timeline_.active())
    for (const auto& n : r.names) {
      timeline_.end(n);
      std::string act = op_type_name(r.type);
      std::transform(act.begin(), act.end(), act.begin(), ::toupper);
      if (host_groups(r.process_set, r.type)) act = "HIERARCHICAL_" + act;
      timeline_.begin(n, act);
    }
  Group& g = *git->second;
  try {
    if (r.device) return execute_on_device(r, g);
    switch (r.type) {
      case OpType::kAllreduce: execute_allreduce(r, g); break;
      case OpType::kAllgather: execute_allgather(r, g); break;
      case OpType::kBroadcast: execute_broadcast(r, g); break;
      case OpType::kAlltoall: execute_alltoall(r, g); break;
      case OpType::kReducescatter: execute_reducescatter(r, g); break;
      case OpType::kBarrier:
        barrier(g);
        finish(key_of(r.process_set, r.names[0]), HandleResult{});
        break;
      default: break;
    }
  } catch (const CollectiveError& e) {
    for (const auto& n : r.names) fail_entry(key_of(r.process_set, n), HandleError::kCollective, e.what());
  }
}

ReductionPlan plan_reduction(ReduceOp op, double postscale, int group_size) {
  if (op == ReduceOp::kAverage) return {ReduceOp::kSum, postscale / group_size};
  return {op, postscale};
}

void Engine::execute_allreduce(const Response& r, Group& g) {
  const ReductionPlan plan = plan_reduction(r.op, r.postscale, g.size());
  const ReduceOp op = plan.op;
  const double post = plan.postscale;
  if (r.op == ReduceOp::kAdasum) return execute_adasum(r, g);
  const std::string& first = r.names[0];
  auto entry = entries_.find(key_of(r.process_set, first));
  if (r.names.size() == 1 && entry != entries_.end() && entry->second.members.empty()) {
    // Unfused: reduce straight from the input into the output, no staging copy.
    size_t n = elements(r.shapes[0]);
    const void* in = entry->second.in;
    void* out = entry->second.out;
    if (r.prescale != 1.0) {
      if (in != out) std::memcpy(out, in, n * dtype_size(r.dtype));
      scale_buffer(out, n, r.dtype, r.prescale);
      in = out;
    }
    if (timeline_.active()) timeline_.begin(first, "COLLECTIVE");
    if (std::find(r.presend.begin(), r.presend.end(), rank_) != r.presend.end())
      allreduce_after_send(g, in, out, n, r.dtype, op, post);
    else reduce_all(r.process_set, g, in, out, n, r.dtype, op, post);
    if (timeline_.active()) timeline_.end(first);
    return finish(entry->first, HandleResult{});
  }
  size_t total = 0;
  for (size_t i = 0; i < r.names.size(); ++i) total += r.tensor_bytes(i);
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  uint8_t* buf = fusion_buffer_.data();
  const size_t es = dtype_size(r.dtype);
  // Each member's entry, looked up once (finishing one member leaves the others' iterators valid);
  // end() for a rank that joined.
  std::vector<Entries::iterator> members(r.names.size());
  for (size_t i = 0; i < r.names.size(); ++i) members[i] = entries_.find(key_of(r.process_set, r.names[i]));
  // (The two-level allreduce also reduces in memory, which a scattered buffer does not allow.)
  if (total > tuning::kDirectReduceBytes && !host_groups(r.process_set, OpType::kAllreduce) &&
      execute_allreduce_scattered(r, g, members, total, op, post))
    return;
  if (timeline_.active())
    for (auto& n : r.names) timeline_.begin(n, "MEMCPY_IN_FUSION_BUFFER");
  // Prescaling each piece right after its copy finds it still in cache: cheaper than a second
  // pass over the whole fusion buffer.
  size_t off = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    size_t b = r.tensor_bytes(i);
    auto it = members[i];
    if (it == entries_.end()) {
      std::memset(buf + off, 0, b);  // this rank joined: it contributes zeros
    } else {
      for_each_piece(it->second, b, [&](const void* in, void*, size_t pb, size_t at) {
        std::memcpy(buf + off + at, in, pb);
        scale_buffer(buf + off + at, pb / es, r.dtype, r.prescale);
      });
    }
    off += b;
  }
  if (timeline_.active())
    for (auto& n : r.names) {
      timeline_.end(n);
      timeline_.begin(n, "COLLECTIVE");
    }
  reduce_all(r.process_set, g, buf, buf, total / es, r.dtype, op, post);
  if (timeline_.active())
    for (auto& n : r.names) {
      timeline_.end(n);
      timeline_.begin(n, "MEMCPY_OUT_FUSION_BUFFER");
    }
  off = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    size_t b = r.tensor_bytes(i);
    auto it = members[i];
    if (it != entries_.end()) {
      for_each_piece(it->second, b,
                     [&](const void*, void* out, size_t pb, size_t at) { std::memcpy(out, buf + off + at, pb); });
      if (timeline_.active()) timeline_.end(r.names[i]);
    }
    off += b;
  }
  finish_members(members);
}

void Engine::execute_adasum(const Response& r, Group& g) {
  // Adasum combines each tensor as a whole vector: the coordinator never fuses these responses, and
  // per_rank lists the element count of each tensor of a packed group (one entry otherwise).
  if (r.names.size() != 1) throw CollectiveError("internal: a fused Adasum allreduce");
  const size_t total = r.tensor_bytes(0), es = dtype_size(r.dtype);
  std::vector<size_t> counts(r.per_rank.begin(), r.per_rank.end());
  if (counts.empty()) counts.push_back(total / es);
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  uint8_t* buf = fusion_buffer_.data();
  auto it = entries_.find(key_of(r.process_set, r.names[0]));
  if (it == entries_.end()) {
    std::memset(buf, 0, total);  // this rank joined: a zero vector, which Adasum leaves out
  } else {
    for_each_piece(it->second, total,
                   [&](const void* in, void*, size_t pb, size_t at) { std::memcpy(buf + at, in, pb); });
    scale_buffer(buf, total / es, r.dtype, r.prescale);
  }
  if (timeline_.active()) timeline_.begin(r.names[0], "COLLECTIVE");
  adasum_allreduce(g, buf, counts, r.dtype);
  if (timeline_.active()) timeline_.end(r.names[0]);
  if (it == entries_.end()) return;
  scale_buffer(buf, total / es, r.dtype, r.postscale);
  for_each_piece(it->second, total,
                 [&](const void*, void* out, size_t pb, size_t at) { std::memcpy(out, buf + at, pb); });
  finish(it->first, HandleResult{});
}

bool Engine::members_alias(const Response& r, const std::vector<Entries::iterator>& members) const {
  // Through a fusion buffer every input is read before any output is written, so tensors may
  // share memory (the same tensor twice in one group, an output that is another's input). In
  // place between the tensors they would read each other's half-reduced data: stage those.
  std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
  for (size_t i = 0; i < r.names.size(); ++i)
    for_each_piece(members[i]->second, r.tensor_bytes(i), [&](const void* in, void* out, size_t pb, size_t) {
      auto* o = static_cast<const uint8_t*>(out);
      ranges.emplace_back(o, o + pb);
      auto* x = static_cast<const uint8_t*>(in);
      if (x != o) ranges.emplace_back(x, x + pb);
    });
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return true;
  return false;
}

bool Engine::execute_allreduce_scattered(const Response& r, Group& g, const std::vector<Entries::iterator>& members,
                                         size_t total, ReduceOp op, double post) {
  // Only the ring moves every byte through the transport (the direct path reduces in memory), and
  // a rank that joined has no tensors to point at: those stage through the fusion buffer.
  for (const auto& it : members)
    if (it == entries_.end()) return false;
  if (members_alias(r, members)) return false;
  const size_t es = dtype_size(r.dtype);
  ScatteredBuffer sb;
  sb.base = fusion_buffer_.data();  // addresses only: nothing reads or writes it on this path
  sb.bytes = total;
  size_t off = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    for_each_piece(members[i]->second, r.tensor_bytes(i), [&](const void*, void* out, size_t pb, size_t at) {
      sb.start.push_back(off + at);
      sb.where.push_back(static_cast<uint8_t*>(out));
    });
    off += r.tensor_bytes(i);
  }
  ScatterScope scope(g, &sb);
  if (!scope.ok()) return false;
  // The result overwrites each output, so the reduction runs in place there: an output that is not
  // its input starts as a copy of it (prescaled, like any input).
  if (timeline_.active())
    for (auto& n : r.names) timeline_.begin(n, "COLLECTIVE");
  for (size_t i = 0; i < r.names.size(); ++i)
    for_each_piece(members[i]->second, r.tensor_bytes(i), [&](const void* in, void* out, size_t pb, size_t) {
      if (in != out) std::memcpy(out, in, pb);
      scale_buffer(out, pb / es, r.dtype, r.prescale);
    });
  if (g.size() == 1) {
    // Nothing to exchange: each output already holds the whole reduction. (allreduce() would apply
    // the postscale to sb.base, which on this path only names addresses.)
    for (size_t i = 0; i < r.names.size(); ++i)
      for_each_piece(members[i]->second, r.tensor_bytes(i),
                     [&](const void*, void* out, size_t pb, size_t) { scale_buffer(out, pb / es, r.dtype, post); });
  } else {
    allreduce(g, sb.base, const_cast<uint8_t*>(sb.base), total / es, r.dtype, op, post);
  }
  stats_.scattered_allreduces++;
  if (timeline_.active())
    for (auto& n : r.names) timeline_.end(n);
  finish_members(members);
  return true;
}

void Engine::execute_allgather(const Response& r, Group& g) {
  std::string key = key_of(r.process_set, r.names[0]);
  auto it = entries_.find(key);
  const auto& shape = r.shapes[0];
  const std::vector<size_t> bytes = r.gathered_bytes();
  int64_t rows = 0;
  for (int i = 0; i < g.size(); ++i) rows += r.per_rank[i];
  HandleResult res;
  const TensorRequest* req = it != entries_.end() ? &it->second : nullptr;
  uint8_t* out = result_memory(req, static_cast<size_t>(rows) * row_bytes(shape, r.dtype), &res);
  if (res.has_data) {
    res.shape = shape.empty() ? std::vector<int64_t>{rows} : shape;
    res.shape[0] = rows;
  }
  const SentEarly early = sent_early(r, g.rank());
  // (Inputs go out early only in a flat set: allgatherv itself then.)
  if (early != SentEarly::kNone) allgatherv(g, req ? req->in : nullptr, out, bytes, early);
  else gather_all(r.process_set, g, req ? req->in : nullptr, out, bytes);
  finish(key, std::move(res));
}

void Engine::execute_broadcast(const Response& r, Group& g) {
  std::string key = key_of(r.process_set, r.names[0]);
  auto it = entries_.find(key);
  size_t b = r.tensor_bytes(0);
  // Only the root's input counts (the others send nothing).
  const SentEarly early = std::find(r.presend.begin(), r.presend.end(), r.root) == r.presend.end() ? SentEarly::kNone
                          : g.rank() == r.root ? SentEarly::kByThisRank
                                               : SentEarly::kByOthers;
  if (it == entries_.end()) {
    std::vector<uint8_t> sink(b);  // joined: receive and drop
    broadcast(g, sink.data(), b, r.root, early);
    return;
  }
  if (g.rank() == r.root && it->second.in != it->second.out) std::memcpy(it->second.out, it->second.in, b);
  broadcast(g, it->second.out, b, r.root, early);
  finish(key, HandleResult{});
}

void Engine::execute_alltoall(const Response& r, Group& g) {
  std::string key = key_of(r.process_set, r.names[0]);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  int n = g.size(), me = g.rank();
  const auto& shape = r.shapes[0];
  size_t rb = row_bytes(shape, r.dtype);
  std::vector<size_t> send(n), recv(n);
  HandleResult res;
  int64_t rows = 0;
  for (int p = 0; p < n; ++p) {
    send[p] = static_cast<size_t>(r.per_rank[me * n + p]) * rb;
    recv[p] = static_cast<size_t>(r.per_rank[p * n + me]) * rb;
    rows += r.per_rank[p * n + me];
  }
  uint8_t* out = result_memory(&it->second, static_cast<size_t>(rows) * rb, &res);
  if (res.has_data) {
    res.shape = shape.empty() ? std::vector<int64_t>{rows} : shape;
    res.shape[0] = rows;
  }
  if (res.has_data || it->second.received_splits_wanted)
    for (int p = 0; p < n; ++p) res.splits.push_back(r.per_rank[p * n + me]);
  alltoallv(g, it->second.in, send, out, recv);
  finish(key, std::move(res));
}

void Engine::execute_reducescatter(const Response& r, Group& g) {
  std::string key = key_of(r.process_set, r.names[0]);
  auto it = entries_.find(key);
  int n = g.size();
  const auto& shape = r.shapes[0];
  int64_t dim0 = shape.empty() ? 1 : shape[0];
  size_t row_elems = row_bytes(shape, r.dtype) / dtype_size(r.dtype);
  std::vector<size_t> counts(n);
  for (int i = 0; i < n; ++i) counts[i] = static_cast<size_t>(dim0 / n + (i < dim0 % n ? 1 : 0)) * row_elems;
  size_t total = elements(shape);
  std::vector<uint8_t> scaled;
  const void* in = it != entries_.end() ? it->second.in : nullptr;
  if (!in || r.prescale != 1.0) {
    scaled.assign(total * dtype_size(r.dtype), 0);
    if (in) std::memcpy(scaled.data(), in, scaled.size());
    scale_buffer(scaled.data(), total, r.dtype, r.prescale);
    in = scaled.data();
  }
  const ReductionPlan plan = plan_reduction(r.op, r.postscale, n);
  HandleResult res;
  uint8_t* out =
      result_memory(it != entries_.end() ? &it->second : nullptr, counts[g.rank()] * dtype_size(r.dtype), &res);
  if (res.has_data) {
    res.shape = shape.empty() ? std::vector<int64_t>{1} : shape;
    res.shape[0] = dim0 / n + (g.rank() < dim0 % n ? 1 : 0);
  }
  reducescatter(g, in, out, counts, r.dtype, plan.op);
  scale_buffer(out, counts[g.rank()], r.dtype, plan.postscale);
  finish(key, std::move(res));
}

}  // namespace hs
