// Alltoallv: one exchange carrying every pair's piece concurrently; the piece for ourselves is a
// local copy. Per-pair sizes are arbitrary (including 0, which sends nothing).
#include <cstring>
#include <string>
#include <vector>

#include "collectives/checks.h"
#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "common/errors.h"

namespace hs {

void alltoallv(Group& g, const void* in, const std::vector<size_t>& send_bytes, void* out,
               const std::vector<size_t>& recv_bytes) {
  check_group(g, "alltoallv");
  const int n = g.size(), r = g.rank();
  check_per_rank(send_bytes, n, "alltoallv", "send_bytes");
  check_per_rank(recv_bytes, n, "alltoallv", "recv_bytes");
  if (send_bytes[size_t(r)] != recv_bytes[size_t(r)]) {
    throw CollectiveError("alltoallv: rank " + std::to_string(r) + " sends itself " +
                          std::to_string(send_bytes[size_t(r)]) + " bytes but expects " +
                          std::to_string(recv_bytes[size_t(r)]));
  }
  const std::vector<Segment> sblock = prefix_partition(send_bytes);
  const std::vector<Segment> rblock = prefix_partition(recv_bytes);
  check_buffer(in, sblock.back().end(), "alltoallv", "input");
  check_buffer(out, rblock.back().end(), "alltoallv", "output");
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  for (int p = 0; p < n; ++p) {
    const Segment& s = sblock[size_t(p)];
    const Segment& d = rblock[size_t(p)];
    if (p == r) {
      if (s.count > 0) std::memcpy(dst + d.offset, src + s.offset, s.count);
      continue;
    }
    if (s.count > 0) sends.push_back(SendSpec{p, src + s.offset, s.count});
    if (d.count > 0) {
      RecvSpec rs;
      rs.peer = p;
      rs.dest = dst + d.offset;
      rs.bytes = d.count;
      recvs.push_back(rs);
    }
  }
  if (!sends.empty() || !recvs.empty()) g.exchange(sends, recvs);
}

}  // namespace hs
