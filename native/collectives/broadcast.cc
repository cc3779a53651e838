// Broadcast. Small buffers, or 2 ranks: the root sends to every peer in one exchange. Large
// buffers with 3+ ranks: a pipelined chain root -> root+1 -> ... -> root-1. Every link carries
// the buffer once and all links work at once, so the time is about one buffer transfer plus
// (ranks - 2) chunks, instead of the root pushing (ranks - 1) full copies.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "collectives/checks.h"
#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "collectives/tuning.h"
#include "common/errors.h"

namespace hs {
namespace {

void broadcast_direct(Group& g, char* buf, size_t bytes, int root, bool sent) {
  const int n = g.size(), r = g.rank();
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  if (r == root) {
    if (sent) return;
    for (int p = 0; p < n; ++p) {
      if (p != root) sends.push_back(SendSpec{p, buf, bytes});
    }
  } else {
    RecvSpec rs;
    rs.peer = root;
    rs.dest = buf;
    rs.bytes = bytes;
    recvs.push_back(rs);
  }
  g.exchange(sends, recvs);
}

size_t chain_chunk(size_t bytes, int n) {
  const double ideal = std::sqrt(double(bytes) * double(tuning::kLatencyBandwidthBytes) / double(n - 2));
  return std::clamp(size_t(ideal), tuning::kMinBroadcastChunk, tuning::kMaxBroadcastChunk);
}

void broadcast_chain(Group& g, char* buf, size_t bytes, int root) {
  const int n = g.size();
  const int pos = wrap(g.rank() - root, n);  // position in the chain, root = 0
  const int next = wrap(g.rank() + 1, n), prev = wrap(g.rank() - 1, n);
  const size_t chunk = chain_chunk(bytes, n);
  const long chunks = long((bytes + chunk - 1) / chunk);
  auto piece = [&](long c) { return std::min(chunk, bytes - size_t(c) * chunk); };
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  // At step t, position p receives chunk t-p+1 and forwards chunk t-p (received last step).
  for (long t = 0; t < chunks + n - 2; ++t) {
    sends.clear();
    recvs.clear();
    const long out_chunk = t - pos, in_chunk = t - pos + 1;
    if (pos + 1 < n && out_chunk >= 0 && out_chunk < chunks) {
      sends.push_back(SendSpec{next, buf + size_t(out_chunk) * chunk, piece(out_chunk)});
    }
    if (pos > 0 && in_chunk >= 0 && in_chunk < chunks) {
      RecvSpec rs;
      rs.peer = prev;
      rs.dest = buf + size_t(in_chunk) * chunk;
      rs.bytes = piece(in_chunk);
      recvs.push_back(rs);
    }
    if (!sends.empty() || !recvs.empty()) g.exchange(sends, recvs);
  }
}

}  // namespace

void broadcast(Group& g, void* buf, size_t bytes, int root, SentEarly early) {
  check_group(g, "broadcast");
  const int n = g.size();
  if (root < 0 || root >= n) {
    throw CollectiveError("broadcast: root rank " + std::to_string(root) + " is out of range for a group of " +
                          std::to_string(n) + " ranks");
  }
  check_buffer(buf, bytes, "broadcast", "buffer");
  if (n == 1 || bytes == 0) return;
  char* p = static_cast<char*>(buf);
  if (bytes <= tuning::kDirectBroadcastBytes || n == 2 || early != SentEarly::kNone) {
    broadcast_direct(g, p, bytes, root, early == SentEarly::kByThisRank);
  } else {
    broadcast_chain(g, p, bytes, root);
  }
}

}  // namespace hs
