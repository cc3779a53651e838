#include "collectives/hierarchical.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "collectives/checks.h"
#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "collectives/scratch.h"
#include "common/errors.h"

namespace hs {

HostLayout::HostLayout(const std::vector<std::string>& host_of_member, int my_index) {
  std::map<std::string, size_t> index_of;
  for (int i = 0; i < static_cast<int>(host_of_member.size()); ++i) {
    auto it = index_of.emplace(host_of_member[size_t(i)], hosts.size()).first;
    if (it->second == hosts.size()) hosts.emplace_back();
    std::vector<int>& members = hosts[it->second];
    if (i == my_index) {
      my_host = static_cast<int>(it->second);
      my_local = static_cast<int>(members.size());
    }
    members.push_back(i);
  }
  int next = 0;
  lanes = hosts.empty() ? 0 : static_cast<int>(hosts[0].size());
  for (const auto& members : hosts) {
    lanes = std::min(lanes, static_cast<int>(members.size()));
    for (int i : members) in_rank_order = in_rank_order && i == next++;
  }
}

bool HostLayout::applies(Switch setting) const {
  size_t largest = 0;
  for (const auto& members : hosts) largest = std::max(largest, members.size());
  if (hosts.size() < 2 || largest < 2 || setting == Switch::kOff) return false;
  return setting == Switch::kOn || lanes >= 2;
}

namespace {
void check_host_groups(const HostGroups& h, const char* who) {
  const HostLayout& l = h.layout;
  if (!h.local || h.local->size() != static_cast<int>(l.hosts[size_t(l.my_host)].size()) ||
      (l.my_local < l.lanes) != (h.cross != nullptr) ||
      (h.cross && h.cross->size() != static_cast<int>(l.hosts.size())))
    throw CollectiveError(std::string("internal: ") + who + " was given groups that do not match its host layout");
}
}  // namespace

void hierarchical_allreduce(HostGroups& h, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                            double postscale) {
  check_host_groups(h, "hierarchical allreduce");
  check_dtype(dtype, "allreduce");
  check_reduce_op(op, "allreduce");
  const size_t es = dtype_size(dtype);
  check_buffer(in, count * es, "allreduce", "input");
  check_buffer(out, count * es, "allreduce", "output");
  if (count == 0) return;
  const HostLayout& l = h.layout;
  const std::vector<Segment> piece = even_partition(count, l.lanes);
  std::vector<size_t> counts(size_t(h.local->size()), 0), bytes(counts.size(), 0);
  for (int j = 0; j < l.lanes; ++j) {
    counts[size_t(j)] = piece[size_t(j)].count;
    bytes[size_t(j)] = piece[size_t(j)].count * es;
  }
  const bool owner = l.my_local < l.lanes;
  char* const base = static_cast<char*>(out);
  // This rank's piece, reduced in place where the result goes (ranks past the lanes own none).
  char* const mine = owner ? base + piece[size_t(l.my_local)].offset * es : base;
  reducescatter(*h.local, in, mine, counts, dtype, op);
  if (owner) allreduce(*h.cross, mine, mine, piece[size_t(l.my_local)].count, dtype, op, postscale);
  allgatherv(*h.local, mine, base, bytes);
}

void hierarchical_allgatherv(HostGroups& h, const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  check_host_groups(h, "hierarchical allgather");
  const HostLayout& l = h.layout;
  const int n = static_cast<int>(bytes_per_rank.size());
  int members = 0;
  for (const auto& m : l.hosts) members += static_cast<int>(m.size());
  check_per_rank(bytes_per_rank, members, "allgatherv", "bytes_per_rank");
  const std::vector<Segment> block = prefix_partition(bytes_per_rank);
  const size_t total = block.back().end();
  const std::vector<int>& my_members = l.hosts[size_t(l.my_host)];
  const int me = my_members[size_t(l.my_local)];
  check_buffer(in, block[size_t(me)].count, "allgatherv", "input");
  check_buffer(out, total, "allgatherv", "output");
  if (total == 0) return;
  char* const dst = static_cast<char*>(out);
  if (l.my_local != 0) {
    // 1. (not a leader) hand my block to my host's leader; 3. receive everything from it.
    if (block[size_t(me)].count > 0) h.local->exchange({SendSpec{0, in, block[size_t(me)].count}}, {});
    broadcast(*h.local, dst, total, 0);
    return;
  }
  // Where each member's block sits with the blocks laid out host after host, and each host's share.
  std::vector<size_t> packed_at(size_t(n), 0), host_bytes(l.hosts.size(), 0);
  size_t at = 0;
  for (size_t k = 0; k < l.hosts.size(); ++k)
    for (int i : l.hosts[k]) {
      packed_at[size_t(i)] = at;
      at += block[size_t(i)].count;
      host_bytes[k] += block[size_t(i)].count;
    }
  // With hosts in rank order that layout is the result's; otherwise it is staged and reordered.
  std::unique_ptr<ScratchLease> staging;
  if (!l.in_rank_order) staging.reset(new ScratchLease(total));
  char* const packed = staging ? staging->data() : dst;
  // 1. gather my host's blocks.
  if (block[size_t(me)].count > 0 && packed + packed_at[size_t(me)] != in)
    std::memmove(packed + packed_at[size_t(me)], in, block[size_t(me)].count);
  std::vector<RecvSpec> recvs;
  for (size_t k = 1; k < my_members.size(); ++k) {
    const int i = my_members[k];
    if (block[size_t(i)].count == 0) continue;
    RecvSpec rs;
    rs.peer = static_cast<int>(k);
    rs.dest = packed + packed_at[size_t(i)];
    rs.bytes = block[size_t(i)].count;
    recvs.push_back(rs);
  }
  if (!recvs.empty()) h.local->exchange({}, recvs);
  // 2. exchange the hosts' shares among the leaders (lane 0's cross group).
  allgatherv(*h.cross, packed + packed_at[size_t(my_members[0])], packed, host_bytes);
  if (staging)
    for (int i = 0; i < n; ++i)
      if (block[size_t(i)].count > 0)
        std::memcpy(dst + block[size_t(i)].offset, packed + packed_at[size_t(i)], block[size_t(i)].count);
  // 3. hand the result to my host's members.
  broadcast(*h.local, dst, total, 0);
}

}  // namespace hs
