// Barrier by dissemination: in round k every rank signals rank+2^k and waits for rank-2^k.
// After ceil(log2 n) rounds each rank has (transitively) heard from every other rank, so none
// can leave before all have entered. One-byte messages: a transport may treat zero-byte
// messages specially, and a byte costs the same.
#include <vector>

#include "collectives/checks.h"
#include "collectives/collectives.h"
#include "collectives/partition.h"

namespace hs {

void barrier(Group& g) {
  check_group(g, "barrier");
  const int n = g.size(), r = g.rank();
  static const char kToken = 1;
  char sink = 0;
  for (int dist = 1; dist < n; dist *= 2) {
    RecvSpec rs;
    rs.peer = wrap(r - dist, n);
    rs.dest = &sink;
    rs.bytes = 1;
    g.exchange({SendSpec{wrap(r + dist, n), &kToken, 1}}, {rs});
  }
}

}  // namespace hs
