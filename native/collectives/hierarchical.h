// Two-level allreduce and allgather for a group whose ranks sit on several hosts: the heavy
// traffic stays inside each host (shared memory) and only one share of the data per host crosses
// the network, in rings over as many hosts as there are, not over every rank.
//
// Hosts may hold different numbers of the group's ranks. The buffer is cut into `lanes` pieces,
// lanes being the rank count of the smallest host; on every host the member with local index j
// (j < lanes) owns piece j:
//   allreduce  1. reduce-scatter inside each host, piece j to local index j (ranks beyond the
//                 lanes own nothing but still add their data);
//              2. allreduce of piece j across hosts among the local-index-j members (postscale here);
//              3. allgather inside each host: every owner hands its piece to its host's members.
//   allgather  1. each host's first member (its leader) gathers its host's blocks;
//              2. the leaders allgather the hosts' blocks across hosts;
//              3. each leader puts the blocks in rank order and broadcasts them inside its host.
// Every piece of a result is computed by exactly one rank per lane and then copied verbatim, so
// every rank ends with the same bits, for any placement (hosts of 1, 2 and 3 ranks; hosts whose
// ranks interleave in rank order).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/dtype.h"
#include "transport/group.h"

namespace hs {

// Which members of a group share a host, from each member's host id (by index in the group).
struct HostLayout {
  HostLayout(const std::vector<std::string>& host_of_member, int my_index);
  std::vector<std::vector<int>> hosts;  // member indices of each host; hosts ordered by their first member
  int my_host = 0;
  int my_local = 0;   // my index within hosts[my_host]
  int lanes = 0;      // members of the smallest host: the number of cross-host allreduces
  bool in_rank_order = true;  // hosts[0], hosts[1], ... concatenated are 0, 1, ..., n-1
  // Whether the two-level algorithms run, given the setting (HOROVOD_HIERARCHICAL_ALLREDUCE or
  // HOROVOD_HIERARCHICAL_ALLGATHER). Never on one host or with one rank per host (nothing to gain:
  // it is the flat algorithm plus copies); when switched on, on any other placement; automatically,
  // when there are several hosts and every one holds more than one rank (with a single-rank host
  // the one lane carries the whole buffer across hosts through that rank: little gain over flat).
  bool applies(Switch setting) const;
};

// The groups a two-level collective runs over: subsets of the whole group over the same links.
struct HostGroups {
  explicit HostGroups(HostLayout l) : layout(std::move(l)) {}
  HostLayout layout;
  std::unique_ptr<Group> local;  // my host's members, in group order
  std::unique_ptr<Group> cross;  // local index my_local of every host, in host order; null past the lanes
  bool allreduce = false;        // layout.applies(HOROVOD_HIERARCHICAL_ALLREDUCE)
  bool allgather = false;        // layout.applies(HOROVOD_HIERARCHICAL_ALLGATHER)
};

// allreduce() (collectives.h) of the whole group, in two levels; same arguments and results.
void hierarchical_allreduce(HostGroups& h, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                            double postscale = 1.0);

// allgatherv() (collectives.h) of the whole group, in two levels; bytes_per_rank by group index.
void hierarchical_allgatherv(HostGroups& h, const void* in, void* out, const std::vector<size_t>& bytes_per_rank);

}  // namespace hs
