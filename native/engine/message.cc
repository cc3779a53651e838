#include "engine/message.h"

#include <algorithm>

namespace hs {

const char* op_type_name(OpType t) {
  switch (t) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kBarrier: return "barrier";
    case OpType::kJoin: return "join";
    case OpType::kAddProcessSet: return "add_process_set";
    case OpType::kRemoveProcessSet: return "remove_process_set";
  }
  return "unknown";
}

void append_member_shape(std::vector<int64_t>* splits, const std::vector<int64_t>& shape) {
  splits->push_back(static_cast<int64_t>(shape.size()));
  splits->insert(splits->end(), shape.begin(), shape.end());
}

std::string member_shapes_text(const std::vector<int64_t>& splits) {
  std::string out;
  for (size_t i = 0; i < splits.size();) {
    size_t ndim = static_cast<size_t>(std::max<int64_t>(0, splits[i++]));
    out += out.empty() ? "[" : ", [";
    for (size_t d = 0; d < ndim && i < splits.size(); ++d, ++i) out += (d ? ", " : "") + std::to_string(splits[i]);
    out += "]";
  }
  return out.empty() ? "no members" : out;
}

int64_t RequestMeta::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string RequestMeta::signature() const {
  WireWriter w;
  write(w);
  return w.take();
}

void RequestMeta::write(WireWriter& w) const {
  w.put<uint8_t>(static_cast<uint8_t>(type));
  w.put_str(name);
  w.put<int32_t>(static_cast<int32_t>(dtype));
  w.put_vec(shape);
  w.put<int32_t>(root);
  w.put<int32_t>(static_cast<int32_t>(op));
  w.put<double>(prescale);
  w.put<double>(postscale);
  w.put<int32_t>(process_set);
  w.put_vec(splits);
  w.put<uint8_t>(device ? 1 : 0);
}

RequestMeta RequestMeta::read(WireReader& r) {
  RequestMeta m;
  m.type = static_cast<OpType>(r.get<uint8_t>());
  m.name = r.get_str();
  m.dtype = static_cast<DataType>(r.get<int32_t>());
  m.shape = r.get_vec<int64_t>();
  m.root = r.get<int32_t>();
  m.op = static_cast<ReduceOp>(r.get<int32_t>());
  m.prescale = r.get<double>();
  m.postscale = r.get<double>();
  m.process_set = r.get<int32_t>();
  m.splits = r.get_vec<int64_t>();
  m.device = r.get<uint8_t>() != 0;
  return m;
}

size_t Response::tensor_bytes(size_t i) const {
  size_t n = dtype_size(dtype);
  for (int64_t d : shapes[i]) n *= static_cast<size_t>(d);
  return n;
}

std::vector<size_t> Response::gathered_bytes() const {
  size_t row = dtype_size(dtype);
  for (size_t i = 1; i < shapes[0].size(); ++i) row *= static_cast<size_t>(shapes[0][i]);
  std::vector<size_t> bytes(per_rank.size());
  for (size_t r = 0; r < per_rank.size(); ++r) bytes[r] = static_cast<size_t>(per_rank[r]) * row;
  return bytes;
}

void Response::write(WireWriter& w) const {
  w.put<uint8_t>(static_cast<uint8_t>(type));
  w.put<uint32_t>(static_cast<uint32_t>(names.size()));
  for (const auto& n : names) w.put_str(n);
  w.put_str(error);
  w.put<int32_t>(static_cast<int32_t>(dtype));
  w.put<int32_t>(static_cast<int32_t>(op));
  w.put<double>(prescale);
  w.put<double>(postscale);
  w.put<int32_t>(process_set);
  w.put<int32_t>(root);
  w.put<uint32_t>(static_cast<uint32_t>(shapes.size()));
  for (const auto& s : shapes) w.put_vec(s);
  w.put_vec(per_rank);
  w.put_vec(ranks);
  w.put<int32_t>(value);
  w.put_vec(cache_ids);
  w.put_vec(presend);
  w.put_vec(presend_bytes);
  w.put<uint8_t>(device ? 1 : 0);
}

Response Response::read(WireReader& r) {
  Response x;
  x.type = static_cast<OpType>(r.get<uint8_t>());
  uint32_t n = r.get<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) x.names.push_back(r.get_str());
  x.error = r.get_str();
  x.dtype = static_cast<DataType>(r.get<int32_t>());
  x.op = static_cast<ReduceOp>(r.get<int32_t>());
  x.prescale = r.get<double>();
  x.postscale = r.get<double>();
  x.process_set = r.get<int32_t>();
  x.root = r.get<int32_t>();
  uint32_t ns = r.get<uint32_t>();
  for (uint32_t i = 0; i < ns; ++i) x.shapes.push_back(r.get_vec<int64_t>());
  x.per_rank = r.get_vec<int64_t>();
  x.ranks = r.get_vec<int32_t>();
  x.value = r.get<int32_t>();
  x.cache_ids = r.get_vec<int32_t>();
  x.presend = r.get_vec<int32_t>();
  x.presend_bytes = r.get_vec<int64_t>();
  x.device = r.get<uint8_t>() != 0;
  return x;
}

}  // namespace hs
