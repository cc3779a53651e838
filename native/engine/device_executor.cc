// Executing a negotiated response on device memory: its tensors go to the NCCL data plane, which
// runs them as one NCCL group on its own stream (gpu/nccl_plane.h). Outputs are allocated by the
// framework before it submits (allgather and alltoall sizes are agreed on the host first), so
// results carry no data here.
#include "common/errors.h"
#include "engine/engine.h"

namespace hs {

namespace {
gpu::DeviceOp::Kind device_kind(OpType t) {
  switch (t) {
    case OpType::kAllreduce: return gpu::DeviceOp::kAllreduce;
    case OpType::kAllgather: return gpu::DeviceOp::kAllgather;
    case OpType::kBroadcast: return gpu::DeviceOp::kBroadcast;
    case OpType::kAlltoall: return gpu::DeviceOp::kAlltoall;
    case OpType::kReducescatter: return gpu::DeviceOp::kReducescatter;
    default: throw CollectiveError(std::string(op_type_name(t)) + " does not run on the GPU");
  }
}
}  // namespace

void Engine::execute_on_device(const Response& r, Group& g) {
  gpu::DeviceOp op;
  op.kind = device_kind(r.type);
  op.dtype = r.dtype;
  op.op = r.op;
  op.prescale = r.prescale;
  op.postscale = r.postscale;
  op.root = r.root;
  const auto& shape = r.shapes[0];
  const size_t es = dtype_size(r.dtype);
  for (size_t i = 1; i < shape.size(); ++i) op.row_elements *= static_cast<size_t>(shape[i]);
  const int n = g.size();
  if (op.kind == gpu::DeviceOp::kReducescatter) {
    int64_t dim0 = shape.empty() ? 1 : shape[0];
    for (int i = 0; i < n; ++i) op.rows.push_back(dim0 / n + (i < dim0 % n ? 1 : 0));
  } else {
    op.rows = r.per_rank;
  }
  std::vector<Entries::iterator> members;
  std::vector<gpu::DeviceTensor> tensors;
  int device = -1;
  for (size_t i = 0; i < r.names.size(); ++i) {
    auto it = entries_.find(key_of(r.process_set, r.names[i]));
    // (The coordinator refuses device collectives with joined ranks, so every rank has each one.)
    if (it == entries_.end()) throw CollectiveError("internal: device collective '" + r.names[i] + "' has no request");
    const TensorRequest& req = it->second;
    if (device >= 0 && req.device != device)
      throw CollectiveError("tensors on GPUs " + std::to_string(device) + " and " + std::to_string(req.device) +
                            " in one NCCL collective; a process runs its NCCL collectives on one GPU");
    device = req.device;
    if (req.members.empty()) {
      tensors.push_back({req.in, req.out, r.tensor_bytes(i) / es, req.stream});
    } else {
      for (const PackedMember& m : req.members) tensors.push_back({m.in, m.out, m.bytes / es, req.stream});
    }
    members.push_back(it);
  }
  if (!nccl_) nccl_.reset(new gpu::NcclPlane(cfg_.data_timeout_seconds));
  nccl_->run(r.process_set, device, g, op, tensors);
  stats_.nccl_collectives++;
  finish_members(members);
}

}  // namespace hs
