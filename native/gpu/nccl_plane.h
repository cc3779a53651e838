// The NCCL data plane: collectives on device memory, run by NCCL on a stream of its own.
//
// The engine negotiates device collectives like host ones (so every rank runs the same ones in the
// same order) and hands each negotiated response here. One communicator per process set and
// device, created the first time the set runs a device collective: the set's first rank makes the
// ncclUniqueId and sends it to the others over the set's host links (the core's own control
// plane), together with each rank's host and GPU bus id, so that two ranks sharing a GPU (which
// NCCL refuses) get a clear error on every rank instead of a hang. Each call waits on the callers'
// CUDA streams (an event recorded there), runs NCCL on the plane's stream, and makes the callers'
// streams wait for its completion event, so kernels queued after the collective see its result;
// the call returns once that event has completed, within the data timeout.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "gpu/gpu_library.h"
#include "transport/group.h"

namespace hs::gpu {

// One tensor of a device collective, in its rank's memory.
struct DeviceTensor {
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;        // elements of `in` (the whole tensor; alltoall: everything sent)
  uintptr_t stream = 0;    // the caller's cudaStream_t when it submitted
};

// What a response asks of NCCL, in the set's ranks (indices in its Group).
struct DeviceOp {
  enum Kind { kAllreduce, kAllgather, kBroadcast, kAlltoall, kReducescatter } kind = kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0, postscale = 1.0;
  int root = 0;                    // broadcast: index in the set
  size_t row_elements = 1;         // elements per dim-0 row
  std::vector<int64_t> rows;       // allgather / reducescatter: rows per rank; alltoall: rows sent
                                   // by rank i to rank j at [i * size + j]
};

// Whether NCCL runs `op` on `dtype` with these scales (else the framework stages through host
// memory): no Adasum, int16, uint16 or bool reductions; scaling only for floating-point Sum/Average.
bool nccl_supports(DataType dtype, ReduceOp op, double prescale, double postscale, bool reduces);

class NcclPlane {
 public:
  explicit NcclPlane(double timeout_seconds) : timeout_s_(timeout_seconds) {}
  ~NcclPlane();
  NcclPlane(const NcclPlane&) = delete;
  NcclPlane& operator=(const NcclPlane&) = delete;

  // Runs one negotiated device collective of `process_set` on `device` (all tensors of a fused
  // allreduce in one NCCL group). `g` is the set's host group: it carries the unique id the first
  // time. Throws CollectiveError for a request NCCL cannot run and TransportError when NCCL or
  // CUDA fails or the GPU work outlives the timeout (the communicator is then aborted).
  void run(int32_t process_set, int device, Group& g, const DeviceOp& op, const std::vector<DeviceTensor>& tensors);
  // Destroys the set's communicators (remove_process_set).
  void forget(int32_t process_set);

 private:
  struct Comm {
    ncclComm comm = nullptr;
    cudaStream stream = nullptr;
    cudaEvent ready = nullptr, done = nullptr;
    int size = 0, rank = 0;
  };
  Comm& comm_for(int32_t process_set, int device, Group& g);
  void launch(Comm& c, const DeviceOp& op, const std::vector<DeviceTensor>& tensors);
  void wait_done(Comm& c, int32_t process_set, int device);
  void destroy(Comm& c, bool abort);

  double timeout_s_;
  std::map<std::pair<int32_t, int>, Comm> comms_;  // by (process set, device)
};

}  // namespace hs::gpu
