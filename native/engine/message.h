// What ranks tell the coordinator (requests) and what it answers (responses).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/wire_buffer.h"

namespace hs {

enum class OpType : uint8_t {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kBarrier,
  kJoin,
  kAddProcessSet,
  kRemoveProcessSet,
};
const char* op_type_name(OpType t);

// "<process set>/<name>": how the engine and the coordinator key a tensor (names are unique per
// process set, not across them).
inline std::string tensor_key(int32_t process_set, const std::string& name) {
  std::string key = std::to_string(process_set);
  key.reserve(key.size() + 1 + name.size());  // one allocation, not one per part
  key += '/';
  key += name;
  return key;
}

struct RequestMeta {
  OpType type = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  int32_t root = 0;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0, postscale = 1.0;
  int32_t process_set = 0;
  // alltoall send splits (dim 0), process-set ranks, or a packed group's member shapes (see
  // append_member_shape; an allreduce with splits is a packed group).
  std::vector<int64_t> splits;
  // On a GPU through the NCCL data plane (gpu/nccl_plane.h) rather than in host memory: every rank
  // must agree, and such requests fuse only with each other.
  bool device = false;
  int64_t num_elements() const;
  // Fields whose equality across ranks the coordinator checks (and that key the response cache).
  std::string signature() const;
  // signature() == other.signature(), without serializing either.
  bool same_signature(const RequestMeta& o) const {
    return type == o.type && dtype == o.dtype && root == o.root && op == o.op && prescale == o.prescale &&
           postscale == o.postscale && process_set == o.process_set && shape == o.shape && name == o.name &&
           splits == o.splits && device == o.device;
  }
  void write(WireWriter& w) const;
  static RequestMeta read(WireReader& r);
};

// A packed grouped allreduce lists its members' shapes in RequestMeta::splits as ndim followed
// by the dimensions, member after member; member_shapes_text renders them for error messages.
void append_member_shape(std::vector<int64_t>* splits, const std::vector<int64_t>& shape);
std::string member_shapes_text(const std::vector<int64_t>& splits);

struct Response {
  OpType type = OpType::kAllreduce;
  std::vector<std::string> names;  // several => a fused allreduce
  std::string error;               // non-empty => every listed tensor fails with it
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0, postscale = 1.0;
  int32_t process_set = 0;
  int32_t root = 0;
  std::vector<std::vector<int64_t>> shapes;  // per tensor (joined ranks build zero inputs from it)
  std::vector<int64_t> per_rank;   // allgather: rank r's dim 0; alltoall: size x size splits matrix
  std::vector<int32_t> ranks;      // process set membership, or ranks that joined
  int32_t value = 0;               // new process set id; last joined rank
  std::vector<int32_t> cache_ids;  // per tensor: >= 0 => ranks cache it under that id
  // Ranks that sent their input ahead of negotiation (speculative small allreduce, single tensor)
  // and how many bytes each sent: they skip sending it again, and on an error every other rank
  // drains those bytes so the links stay in step.
  std::vector<int32_t> presend;
  std::vector<int64_t> presend_bytes;
  bool all_cached = false;         // not sent: every part was a cache hit (compact encoding)
  bool device = false;             // run by the NCCL data plane (RequestMeta::device)
  size_t tensor_bytes(size_t i) const;
  // An allgather's bytes from each rank: per_rank rows of tensor 0's row size.
  std::vector<size_t> gathered_bytes() const;
  void write(WireWriter& w) const;
  static Response read(WireReader& r);
};

}  // namespace hs
