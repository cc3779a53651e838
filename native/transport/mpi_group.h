// A Group whose point-to-point transfers are MPI_Isend/MPI_Irecv on a communicator the user's
// mpi4py program handed us (duplicated, so our tags never meet theirs). Completion is polled with
// MPI_Testall so the transport's liveness checks and timeouts still apply: no silent hang.
#pragma once
#include <cstdint>
#include <vector>

#include "transport/group.h"
#include "transport/transport.h"

namespace hs {

class MpiGroup : public Group {
 public:
  // comm: the MPI_Comm handle (as mpi4py's MPI._handleof gives it) whose rank i is global rank i;
  // ranks: the global ranks in this group; t: used for liveness checks while waiting.
  MpiGroup(uintptr_t comm, std::vector<int> ranks, Transport* t, int data_timeout_ms);
  int rank() const override { return my_index_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  int global_rank(int index) const override { return ranks_[index]; }
  void exchange(const std::vector<SendSpec>& sends, const std::vector<RecvSpec>& recvs) override;

 private:
  void* comm_;
  std::vector<int> ranks_;
  int my_index_ = -1;
  Transport* t_;
  int data_timeout_ms_;
  std::vector<uint8_t> staging_;
};

}  // namespace hs
