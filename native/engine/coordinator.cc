#include "engine/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace hs {

namespace {
using Clock = CoarseClock;  // stall checks count seconds

std::string shape_text(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

std::string ranks_text(const std::vector<int>& r) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < r.size(); ++i) o << (i ? ", " : "") << r[i];
  o << "]";
  return o.str();
}
std::string ranks_text(const std::set<int>& r) { return ranks_text(std::vector<int>(r.begin(), r.end())); }

// per_rank of an Adasum allreduce: the element count of each tensor it combines as one vector (the
// members of a packed group, else the one tensor).
void adasum_segments(const RequestMeta& m, Response* out) {
  if (!dtype_is_float(m.dtype)) {
    out->error = "allreduce of '" + m.name +
                 "': op=Adasum needs floating-point tensors (float16, bfloat16, "
                 "float32 or float64), got " +
                 dtype_name(m.dtype);
    return;
  }
  if (m.splits.empty()) {
    out->per_rank = {m.num_elements()};
    return;
  }
  for (size_t i = 0; i < m.splits.size();) {
    size_t ndim = static_cast<size_t>(std::max<int64_t>(0, m.splits[i++]));
    int64_t count = 1;
    for (size_t d = 0; d < ndim && i < m.splits.size(); ++d) count *= m.splits[i++];
    out->per_rank.push_back(count);
  }
}

// How a stall report names a request: process-set changes by the ranks or id they are about.
std::string describe_request(const RequestMeta& m) {
  if (m.type == OpType::kAddProcessSet) return "add_process_set(" + shape_text(m.splits) + ")";
  if (m.type == OpType::kRemoveProcessSet) return "remove_process_set(id " + std::to_string(m.root) + ")";
  return std::string(op_type_name(m.type)) + " '" + m.name + "'";
}

bool changes_process_sets(OpType t) { return t == OpType::kAddProcessSet || t == OpType::kRemoveProcessSet; }
}  // namespace

Coordinator::Coordinator(int size, const Config& cfg) : size_(size), cfg_(cfg), lane_(size) {
  std::vector<int32_t> all(size);
  for (int i = 0; i < size; ++i) all[i] = i;
  process_sets_[0] = all;
}

const std::vector<int32_t>* Coordinator::process_set(int32_t id) const {
  auto it = process_sets_.find(id);
  return it == process_sets_.end() ? nullptr : &it->second;
}

bool Coordinator::has_work_without(int rank) const {
  if (!ready_.empty() || !join_responses_.empty() || !deferred_.empty()) return true;
  if (joined_.count(rank)) return !pending_.empty();
  for (int32_t id : lane_.waiting())
    if (lane_.has(id, rank)) return true;
  for (const auto& [k, p] : pending_) {
    if (p.by_rank.count(rank)) return true;
    const auto* ranks = process_set(p.by_rank.begin()->second.process_set);
    if (!ranks || std::find(ranks->begin(), ranks->end(), rank) == ranks->end()) return true;
  }
  return false;
}

void Coordinator::set_tuning(size_t fusion_threshold, bool response_cache) {
  cfg_.fusion_threshold = fusion_threshold;
  cache_off_ = !response_cache;
}

const RequestMeta* Coordinator::cached_request(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(cached_requests_.size())) return nullptr;
  return &cached_requests_[id];
}

std::string Coordinator::key(const RequestMeta& m) const { return tensor_key(m.process_set, m.name); }

void Coordinator::add_request(int rank, const RequestMeta& meta, int32_t cache_id, int64_t spec_seq) {
  if (meta.type == OpType::kJoin) {
    handle_join(rank);
    return;
  }
  std::string computed;
  const bool cached = cache_id >= 0 && cache_id < static_cast<int32_t>(cached_keys_.size());
  if (cached && try_cached_lane(rank, cache_id, spec_seq)) return;
  if (!cached) computed = key(meta);
  const std::string& k = cached ? cached_keys_[static_cast<size_t>(cache_id)] : computed;
  // The lane may hold other ranks' submissions of this tensor: they join this one here.
  move_tensor_to_pending(k);
  add_pending(rank, meta, cache_id, spec_seq, k);
}

bool Coordinator::try_cached_lane(int rank, int32_t id, int64_t spec_seq) {
  // (id is a cache id: every one was registered with the lane when it was assigned)
  if (cache_off_ || !joined_.empty() || cached_requests_[static_cast<size_t>(id)].process_set != 0) return false;
  const std::string& k = cached_keys_[static_cast<size_t>(id)];
  if ((!pending_.empty() && pending_.count(k)) || (!deferred_.empty() && deferred_.count(k))) return false;
  switch (lane_.add(rank, id, spec_seq)) {
    case CachedLane::Outcome::kWaiting: return true;
    case CachedLane::Outcome::kComplete: ready_.push_back(Ready{id, {}}); return true;
    case CachedLane::Outcome::kSpeculated: return true;  // every rank finished it on its own
    case CachedLane::Outcome::kDeclined: break;
  }
  return false;
}

void Coordinator::move_tensor_to_pending(const std::string& k) {
  if (lane_.waiting().empty()) return;
  auto number = tensor_numbers_.find(k);
  if (number == tensor_numbers_.end()) return;
  int32_t id = lane_.waiting_id(number->second);
  if (id >= 0) move_to_pending(id);
}

void Coordinator::move_to_pending(int32_t id) {
  CoarseClock::time_point since = lane_.first_seen(id);
  const std::string k = cached_keys_[static_cast<size_t>(id)];
  for (const CachedLane::Sent& s : lane_.take(id))
    add_pending(s.rank, cached_requests_[static_cast<size_t>(id)], id, s.spec_seq, k);
  auto it = pending_.find(k);
  if (it != pending_.end() && since < it->second.first_seen)  // the stall clock keeps running
    it->second.first_seen = it->second.last_warned = since;
}

void Coordinator::add_pending(int rank, const RequestMeta& meta, int32_t cache_id, int64_t spec_seq,
                              const std::string& k) {
  auto earlier = pending_.find(k);
  if (earlier != pending_.end() && earlier->second.by_rank.count(rank)) {
    deferred_[k].push_back(Deferred{rank, meta, cache_id, spec_seq});
    return;
  }
  auto [it, fresh] = pending_.try_emplace(k);
  Pending& p = it->second;
  if (fresh) p.first_seen = p.last_warned = Clock::now();
  p.by_rank[rank] = meta;
  p.cache_ids[rank] = cache_id;
  if (spec_seq >= 0) p.spec_seq[rank] = spec_seq;
  mark_ready_if_complete(k);
}

void Coordinator::replay_deferred(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    auto it = deferred_.find(k);
    if (it == deferred_.end() || pending_.count(k)) continue;
    std::vector<Deferred> held = std::move(it->second);
    deferred_.erase(it);
    for (auto& d : held) add_request(d.rank, d.meta, d.cache_id, d.spec_seq);  // may defer again
  }
}

bool Coordinator::complete(const Pending& p, int32_t ps) const {
  const auto* ranks = process_set(ps);
  if (!ranks) return !p.by_rank.empty();  // unknown set: answer at once with an error
  for (int32_t r : *ranks)
    if (!p.by_rank.count(r) && !(ps == 0 && joined_.count(r))) return false;
  return true;
}

void Coordinator::mark_ready_if_complete(const std::string& k) {
  Pending& p = pending_.at(k);
  const RequestMeta& any = p.by_rank.begin()->second;
  if (p.queued || !complete(p, any.process_set)) return;
  p.queued = true;
  ready_.push_back(Ready{-1, k});
}

void Coordinator::handle_join(int rank) {
  // Joined ranks count as present for the general path only: it takes over the lane's tensors.
  while (!lane_.waiting().empty()) move_to_pending(lane_.waiting().front());
  joined_.insert(rank);
  last_joined_ = rank;
  for (auto& kv : pending_)
    if (!kv.second.queued && kv.second.by_rank.begin()->second.process_set == 0) mark_ready_if_complete(kv.first);
  if (static_cast<int>(joined_.size()) == size_) {
    Response r;
    r.type = OpType::kJoin;
    r.names = {"join"};
    r.value = last_joined_;
    r.ranks.assign(joined_.begin(), joined_.end());
    join_responses_.push_back(r);
    joined_.clear();
  }
}

void Coordinator::validate(const Pending& p, const std::vector<int32_t>& ranks, Response* out) {
  const RequestMeta& first = p.by_rank.begin()->second;
  int first_rank = p.by_rank.begin()->first;
  const char* op = op_type_name(first.type);
  auto mismatch = [&](const char* what, int r, const std::string& a, const std::string& b) {
    out->error = std::string("Mismatched ") + op + " " + what + " for tensor '" + first.name + "': rank " +
                 std::to_string(first_rank) + " has " + a + ", rank " + std::to_string(r) + " has " + b +
                 ". Every rank must submit the same " + what + ".";
  };
  for (const auto& [r, m] : p.by_rank) {
    if (m.type != first.type) return mismatch("operation", r, op_type_name(first.type), op_type_name(m.type));
    if (m.device != first.device) {
      out->error = std::string(op) + " of '" + first.name + "': rank " + std::to_string(first.device ? first_rank : r) +
                   " runs it on the GPU through NCCL, rank " + std::to_string(first.device ? r : first_rank) +
                   " through host memory. NCCL must be usable on every rank or on none: set HOROVOD_GPU_OPERATIONS "
                   "alike on every rank (HOST stages through host memory everywhere)";
      return;
    }
    if (m.dtype != first.dtype) return mismatch("data type", r, dtype_name(first.dtype), dtype_name(m.dtype));
    // (before the shape: a packed group's shape is its members' total)
    if (first.type == OpType::kAllreduce && m.splits != first.splits)
      return mismatch("member shapes", r, member_shapes_text(first.splits), member_shapes_text(m.splits));
    bool rest_only = first.type == OpType::kAllgather || first.type == OpType::kAlltoall;
    if (rest_only) {
      if (m.shape.size() != first.shape.size() ||
          !std::equal(m.shape.begin() + (m.shape.empty() ? 0 : 1), m.shape.end(),
                      first.shape.begin() + (first.shape.empty() ? 0 : 1)))
        return mismatch("shape (all but the first dimension)", r, shape_text(first.shape), shape_text(m.shape));
    } else if (m.shape != first.shape) {
      return mismatch("shape", r, shape_text(first.shape), shape_text(m.shape));
    }
    if ((m.type == OpType::kAllreduce || m.type == OpType::kReducescatter) && m.dtype == DataType::kBool &&
        m.op == ReduceOp::kAverage) {
      out->error = std::string(op) + " of '" + first.name +
                   "': op=Average is undefined for bool tensors; use Sum (logical or), Min or Max";
      return;
    }
    if (first.type == OpType::kAllreduce || first.type == OpType::kReducescatter) {
      if (m.op != first.op) return mismatch("reduce op", r, reduce_op_name(first.op), reduce_op_name(m.op));
      if (m.prescale != first.prescale || m.postscale != first.postscale)
        return mismatch("prescale/postscale factors", r,
                        std::to_string(first.prescale) + "/" + std::to_string(first.postscale),
                        std::to_string(m.prescale) + "/" + std::to_string(m.postscale));
    }
    if (first.type == OpType::kBroadcast && m.root != first.root)
      return mismatch("root rank", r, std::to_string(first.root), std::to_string(m.root));
    if (first.type == OpType::kAddProcessSet && m.splits != first.splits)
      return mismatch("process set ranks", r, shape_text(first.splits), shape_text(m.splits));
    if (first.type == OpType::kRemoveProcessSet && m.root != first.root)
      return mismatch("process set id", r, std::to_string(first.root), std::to_string(m.root));
  }
  int n = static_cast<int>(ranks.size());
  if (first.device && first.process_set == 0 && !joined_.empty()) {
    out->error = std::string(op) + " of '" + first.name +
                 "' cannot run on the GPU through NCCL after a rank called "
                 "join(); set HOROVOD_GPU_OPERATIONS=HOST to use join() with CUDA tensors";
    return;
  }
  // As in Horovod, only reductions go on while ranks have joined (they contribute zeros): an
  // allgather or a broadcast fails with a RuntimeError on the ranks that did not join.
  if (first.process_set == 0 && !joined_.empty() &&
      (first.type == OpType::kAllgather || first.type == OpType::kBroadcast)) {
    const std::string who = joined_.size() > 1 ? "ranks " + ranks_text(joined_) + " have"
                                               : "rank " + std::to_string(*joined_.begin()) + " has";
    out->error = std::string(op) + " of '" + first.name + "' is not supported while " + who +
                 " called join(); only allreduce and reducescatter continue with joined ranks. Run it before "
                 "join() on every rank";
    return;
  }
  switch (first.type) {
    case OpType::kAllreduce:
      if (first.op == ReduceOp::kAdasum) adasum_segments(first, out);
      break;
    case OpType::kBroadcast:
      if (first.root < 0 || first.root >= n)
        out->error = "broadcast of '" + first.name + "': root_rank " + std::to_string(first.root) +
                     " is outside the process set of " + std::to_string(n) + " ranks";
      break;
    case OpType::kAllgather:
      for (int i = 0; i < n; ++i) {
        auto it = p.by_rank.find(ranks[i]);
        out->per_rank.push_back(it == p.by_rank.end() || it->second.shape.empty() ? (it == p.by_rank.end() ? 0 : 1)
                                                                                  : it->second.shape[0]);
      }
      break;
    case OpType::kAlltoall:
      for (int i = 0; i < n; ++i) {
        auto it = p.by_rank.find(ranks[i]);
        if (it == p.by_rank.end()) {
          out->error =
              "alltoall of '" + first.name + "' cannot run after rank " + std::to_string(ranks[i]) + " called join()";
          return;
        }
        const RequestMeta& m = it->second;
        int64_t dim0 = m.shape.empty() ? 1 : m.shape[0];
        if (m.splits.empty()) {
          if (dim0 % n != 0) {
            out->error = "alltoall of '" + first.name + "': rank " + std::to_string(ranks[i]) + "'s first dimension " +
                         std::to_string(dim0) + " does not divide by " + std::to_string(n) + " ranks; pass splits";
            return;
          }
          for (int j = 0; j < n; ++j) out->per_rank.push_back(dim0 / n);
        } else {
          int64_t sum = 0;
          for (int64_t s : m.splits) sum += s;
          if (static_cast<int>(m.splits.size()) != n || sum != dim0) {
            out->error = "alltoall of '" + first.name + "': rank " + std::to_string(ranks[i]) + " gave splits " +
                         shape_text(m.splits) + "; they must have " + std::to_string(n) +
                         " entries summing to the first dimension " + std::to_string(dim0);
            return;
          }
          out->per_rank.insert(out->per_rank.end(), m.splits.begin(), m.splits.end());
        }
      }
      break;
    case OpType::kAddProcessSet: {
      std::vector<int32_t> members(first.splits.begin(), first.splits.end());
      std::sort(members.begin(), members.end());
      bool bad = members.empty() || std::adjacent_find(members.begin(), members.end()) != members.end() ||
                 members.front() < 0 || members.back() >= size_;
      if (bad) {
        out->error = "add_process_set: ranks " + shape_text(first.splits) + " must be distinct global ranks in [0, " +
                     std::to_string(size_) + ")";
        return;
      }
      for (const auto& kv : process_sets_)
        if (kv.second == members) {
          out->error = "add_process_set: a process set with ranks " + shape_text(first.splits) +
                       " already exists (id " + std::to_string(kv.first) + ")";
          return;
        }
      out->value = next_process_set_++;
      out->ranks = members;
      process_sets_[out->value] = members;
      break;
    }
    case OpType::kRemoveProcessSet:
      if (first.root == 0 || !process_sets_.count(first.root)) {
        out->error = "remove_process_set: no removable process set with id " + std::to_string(first.root);
        return;
      }
      out->value = first.root;
      process_sets_.erase(first.root);
      break;
    default: break;
  }
}

bool Coordinator::completed_by_speculation(const Pending& p) const {
  const auto* ranks = process_set(p.by_rank.begin()->second.process_set);
  if (!ranks || p.spec_seq.size() != ranks->size()) return false;
  for (int32_t r : *ranks) {
    auto it = p.spec_seq.find(r);
    if (it == p.spec_seq.end() || it->second != p.spec_seq.begin()->second) return false;
  }
  return true;
}

void Coordinator::note_presend(const Pending& p, Response* r) const {
  if (p.spec_seq.empty()) return;
  r->all_cached = false;  // the compact encoding carries ids only
  for (const auto& kv : p.spec_seq) {
    r->presend.push_back(kv.first);
    const RequestMeta& m = p.by_rank.at(kv.first);
    // (Only the root of a broadcast sends data early; speculation runs in the global set only, whose
    // indices are ranks.)
    const bool sent_data = m.type != OpType::kBroadcast || m.root == kv.first;
    r->presend_bytes.push_back(sent_data ? m.num_elements() * static_cast<int64_t>(dtype_size(m.dtype)) : 0);
  }
}

Response Coordinator::build(const std::string& k, Pending& p) {
  Response r = build_response(k, p);
  note_presend(p, &r);
  return r;
}

Response Coordinator::build_response(const std::string& k, Pending& p) {
  const RequestMeta& first = p.by_rank.begin()->second;
  // Fast path: every rank sent the same cache id, so this exact request was validated before.
  int32_t common = p.cache_ids.begin()->second;
  bool all_same =
      common >= 0 && static_cast<int>(p.cache_ids.size()) == static_cast<int>(process_set(first.process_set)->size());
  for (const auto& kv : p.cache_ids) all_same = all_same && kv.second == common;
  if (all_same && !cache_off_ && common < static_cast<int32_t>(cached_responses_.size())) {
    Response r = cached_responses_[common];
    r.all_cached = true;
    return r;
  }
  Response r;
  r.type = first.type;
  r.names = {first.name};
  r.dtype = first.dtype;
  r.device = first.device;
  r.op = first.op;
  r.prescale = first.prescale;
  r.postscale = first.postscale;
  r.process_set = first.process_set;
  r.root = first.root;
  r.shapes = {first.shape};
  r.cache_ids = {-1};
  const auto* ranks = process_set(first.process_set);
  if (!ranks) {
    r.error = std::string(op_type_name(first.type)) + " of '" + first.name + "': unknown process set id " +
              std::to_string(first.process_set);
    return r;
  }
  validate(p, *ranks, &r);
  // Cache what is fully determined by one signature shared by every rank.
  std::string sig = first.signature();
  bool uniform = static_cast<int>(p.by_rank.size()) == static_cast<int>(ranks->size());
  for (const auto& kv : p.by_rank) uniform = uniform && kv.second.signature() == sig;
  bool cacheable = r.error.empty() && uniform && cfg_.cache_capacity > 0 && !cache_off_ &&
                   (r.type == OpType::kAllreduce || r.type == OpType::kAllgather || r.type == OpType::kBroadcast ||
                    r.type == OpType::kReducescatter || r.type == OpType::kAlltoall);
  if (cacheable) {
    auto it = cache_by_signature_.find(sig);
    if (it != cache_by_signature_.end()) {
      r.cache_ids = {it->second};
    } else if (cached_requests_.size() < cfg_.cache_capacity) {
      int32_t id = static_cast<int32_t>(cached_requests_.size());
      cache_by_signature_[sig] = id;
      cached_requests_.push_back(first);
      cached_keys_.push_back(key(first));
      auto number = tensor_numbers_.try_emplace(cached_keys_.back(), static_cast<int32_t>(tensor_numbers_.size()));
      lane_.add_id(id, number.first->second);
      r.cache_ids = {id};
      cached_responses_.push_back(r);
    }
  }
  (void)k;
  return r;
}

namespace {
// Fusing costs a copy into and out of the fusion buffer; it pays for small tensors (it saves a
// negotiation round and a collective's latency each) but not for large ones, which reduce in
// place faster on their own.
constexpr size_t kFuseTensorsBelowBytes = size_t(256) << 10;

size_t response_bytes(const Response& r) {
  size_t b = 0;
  for (size_t t = 0; t < r.shapes.size(); ++t) b += r.tensor_bytes(t);
  return b;
}
}  // namespace

void Coordinator::fuse(std::vector<Piece>& in, std::vector<Response>* out) {
  auto compatible = [](const Response& a, const Response& b) {
    if (!a.presend.empty() || !b.presend.empty()) return false;  // their inputs went out alone
    if (a.names.size() == 1 && response_bytes(a) >= kFuseTensorsBelowBytes) return false;
    if (b.names.size() == 1 && response_bytes(b) >= kFuseTensorsBelowBytes) return false;
    // (Adasum combines each tensor as a vector of its own: see Engine::execute_adasum)
    return a.type == OpType::kAllreduce && b.type == OpType::kAllreduce && a.op != ReduceOp::kAdasum &&
           a.error.empty() && b.error.empty() && a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale &&
           a.postscale == b.postscale && a.process_set == b.process_set && a.device == b.device;
  };
  // A lane piece is read in place from the cache: one copy per fused response, not per tensor.
  auto view = [&](const Piece& p) -> const Response& {
    return p.cached >= 0 ? cached_responses_[static_cast<size_t>(p.cached)] : p.own;
  };
  size_t i = 0;
  while (i < in.size()) {
    Response cur = in[i].cached >= 0 ? view(in[i]) : std::move(in[i].own);
    if (in[i].cached >= 0) cur.all_cached = true;
    size_t bytes = response_bytes(cur);
    ++i;
    while (i < in.size() && compatible(cur, view(in[i]))) {
      const Response& nx = view(in[i]);
      size_t more = response_bytes(nx);
      if (bytes + more > cfg_.fusion_threshold) break;
      cur.names.insert(cur.names.end(), nx.names.begin(), nx.names.end());
      cur.shapes.insert(cur.shapes.end(), nx.shapes.begin(), nx.shapes.end());
      cur.cache_ids.insert(cur.cache_ids.end(), nx.cache_ids.begin(), nx.cache_ids.end());
      cur.all_cached = cur.all_cached && (in[i].cached >= 0 || nx.all_cached);
      bytes += more;
      ++i;
    }
    out->push_back(std::move(cur));
  }
}

std::vector<Response> Coordinator::take_ready() {
  std::vector<Piece> pieces;
  std::vector<Response> out;
  std::vector<std::string> closed;
  pieces.reserve(ready_.size());
  for (Ready& item : ready_) {
    if (item.cached >= 0) {
      pieces.push_back(Piece{item.cached, {}});
      continue;
    }
    const std::string& k = item.key;
    Pending& p = pending_.at(k);
    if (!completed_by_speculation(p)) pieces.push_back(Piece{-1, build(k, p)});
    pending_.erase(k);
    closed.push_back(k);
  }
  ready_.clear();
  if (!deferred_.empty()) replay_deferred(closed);  // ready again: the next take_ready serves them
  fuse(pieces, &out);
  for (auto& j : join_responses_) out.push_back(std::move(j));
  join_responses_.clear();
  return out;
}

std::string Coordinator::other_set_changes(const std::string& except) const {
  std::string text;
  for (const auto& [k, p] : pending_) {
    const RequestMeta& m = p.by_rank.begin()->second;
    if (k == except || !changes_process_sets(m.type)) continue;
    std::vector<int> who;
    for (const auto& kv : p.by_rank) who.push_back(kv.first);
    text += " Ranks " + ranks_text(who) + " asked for " + describe_request(m) + " instead.";
  }
  return text;
}

void Coordinator::check_stalls(std::vector<Response>* errors) {
  const bool stall_checks = !cfg_.stall_check_disable && cfg_.stall_check_seconds > 0;
  auto now = Clock::now();
  if (stall_checks) {
    // A lane entry waiting this long is a late or diverged rank: the general path times and reports it.
    std::vector<int32_t> slow;
    for (int32_t id : lane_.waiting())
      if (now - lane_.first_seen(id) >= std::chrono::seconds(1)) slow.push_back(id);
    for (int32_t id : slow) move_to_pending(id);
  }
  std::vector<std::string> expired;
  for (auto& [k, p] : pending_) {
    double waited = std::chrono::duration<double>(now - p.first_seen).count();
    double since_warn = std::chrono::duration<double>(now - p.last_warned).count();
    const RequestMeta& first = p.by_rank.begin()->second;
    const auto* ranks = process_set(first.process_set);
    if (!ranks) continue;
    std::vector<int> have, missing;
    for (int32_t r : *ranks) (p.by_rank.count(r) ? have : missing).push_back(r);
    // A process-set change waits for every rank, and ranks that never make it must not wait forever:
    // it has its own deadline, whatever the stall settings.
    const bool set_change_expired = changes_process_sets(first.type) && waited >= cfg_.process_set_timeout_seconds;
    const bool stall_expired = stall_checks && cfg_.stall_shutdown_seconds > 0 && waited >= cfg_.stall_shutdown_seconds;
    if (set_change_expired || stall_expired) {
      Response r;
      r.type = first.type;
      r.names = {first.name};
      r.process_set = first.process_set;
      r.shapes = {first.shape};
      r.cache_ids = {-1};
      if (set_change_expired)
        r.error = describe_request(first) + " timed out after " + std::to_string(static_cast<int>(waited)) +
                  " s: ranks " + ranks_text(missing) + " did not call it (ranks " + ranks_text(have) + " did)." +
                  other_set_changes(k) +
                  " Every rank must make the same process-set calls; "
                  "HOROVOD_PROCESS_SET_TIMEOUT sets how long they wait for each other";
      else
        r.error =
            (changes_process_sets(first.type) ? describe_request(first)
                                              : std::string(op_type_name(first.type)) + " of '" + first.name + "'") +
            " stalled for " + std::to_string(static_cast<int>(waited)) + " s: ranks " + ranks_text(missing) +
            " never submitted it (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)";
      note_presend(p, &r);
      errors->push_back(r);
      expired.push_back(k);
      continue;
    }
    if (stall_checks && waited >= cfg_.stall_check_seconds && since_warn >= cfg_.stall_check_seconds) {
      p.last_warned = now;
      std::fprintf(stderr,
                   "[horovod_spark] WARNING: stall: %s has waited %d s. Submitted by ranks %s; "
                   "missing ranks %s. One or more ranks may have diverged (a conditional collective, "
                   "different tensor names, or an exception). HOROVOD_STALL_CHECK_TIME_SECONDS sets "
                   "this interval.\n",
                   describe_request(first).c_str(), static_cast<int>(waited), ranks_text(have).c_str(),
                   ranks_text(missing).c_str());
      std::fflush(stderr);
    }
  }
  for (const auto& k : expired) {
    pending_.erase(k);
    ready_.erase(
        std::remove_if(ready_.begin(), ready_.end(), [&](const Ready& r) { return r.cached < 0 && r.key == k; }),
        ready_.end());
  }
  if (!deferred_.empty()) replay_deferred(expired);
}

}  // namespace hs
