#include "gpu/nccl_plane.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/errors.h"
#include "common/half.h"

namespace hs::gpu {

namespace {
bool floating(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64;
}

ncclDataType nccl_type(DataType t) {
  switch (t) {
    case DataType::kUInt8: return kNcclUint8;
    case DataType::kInt8: return kNcclInt8;
    case DataType::kInt32: return kNcclInt32;
    case DataType::kInt64: return kNcclInt64;
    case DataType::kFloat16: return kNcclFloat16;
    case DataType::kBFloat16: return kNcclBfloat16;
    case DataType::kFloat32: return kNcclFloat32;
    case DataType::kFloat64: return kNcclFloat64;
    default: throw CollectiveError(std::string("NCCL cannot reduce ") + dtype_name(t) + " tensors");
  }
}

// Makes `device` current on this thread (an engine thread, or a framework thread driving the
// engine) and gives the caller's choice back afterwards.
class DeviceGuard {
 public:
  DeviceGuard(const GpuLibrary& lib, int device) : lib_(lib) {
    check(lib_.GetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(lib_.SetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = -1;
    if (lib_.GetDevice(&now) == kCudaSuccess && now != previous_) lib_.SetDevice(previous_);
  }
  void check(cudaError e, const char* call) const {
    if (e != kCudaSuccess) throw TransportError(lib_.cuda_error(call, e));
  }

 private:
  const GpuLibrary& lib_;
  int previous_ = 0;
};

// What each rank of a set tells the others before NCCL starts.
struct Introduction {
  char host[64];
  char bus_id[32];
  ncclUniqueId id;  // meaningful from the set's first rank
};

const GpuLibrary& library() {
  try {
    return GpuLibrary::get();
  } catch (const std::exception& e) {
    throw CollectiveError(e.what());
  }
}

// The reduction NCCL applies, built for one launch; destroyed after it when it was created.
struct Reduction {
  ncclRedOp op = kNcclSum;
  bool created = false;
};

Reduction make_reduction(const GpuLibrary& lib, ncclComm comm, const DeviceOp& op, int size) {
  const double factor = op.prescale * op.postscale;
  switch (op.op) {
    case ReduceOp::kMin: return {kNcclMin, false};
    case ReduceOp::kMax: return {kNcclMax, false};
    case ReduceOp::kProduct: return {kNcclProd, false};
    case ReduceOp::kSum:
      if (factor == 1.0) return {kNcclSum, false};
      break;
    case ReduceOp::kAverage:
      if (factor == 1.0) return {kNcclAvg, false};
      break;
    default: throw CollectiveError(std::string("NCCL cannot run ") + reduce_op_name(op.op) + " reductions");
  }
  // sum(k * x) == k * sum(x): prescale, postscale and Average's 1/size folded into one factor.
  const double k = op.op == ReduceOp::kAverage ? factor / size : factor;
  uint8_t scalar[8] = {};
  switch (op.dtype) {
    case DataType::kFloat16: {
      uint16_t h = float_to_half(static_cast<float>(k));
      std::memcpy(scalar, &h, sizeof h);
      break;
    }
    case DataType::kBFloat16: {
      uint16_t b = float_to_bfloat16(static_cast<float>(k));
      std::memcpy(scalar, &b, sizeof b);
      break;
    }
    case DataType::kFloat32: {
      float f = static_cast<float>(k);
      std::memcpy(scalar, &f, sizeof f);
      break;
    }
    case DataType::kFloat64: std::memcpy(scalar, &k, sizeof k); break;
    default: throw CollectiveError("NCCL scales floating-point reductions only");
  }
  Reduction r{kNcclSum, true};
  ncclResult e = lib.RedOpCreatePreMulSum(&r.op, scalar, nccl_type(op.dtype), kNcclScalarHostImmediate, comm);
  if (e != kNcclSuccess) throw TransportError(lib.nccl_error("ncclRedOpCreatePreMulSum", e));
  return r;
}

std::vector<uintptr_t> distinct_streams(const std::vector<DeviceTensor>& tensors) {
  std::vector<uintptr_t> s;
  for (const auto& t : tensors)
    if (std::find(s.begin(), s.end(), t.stream) == s.end()) s.push_back(t.stream);
  return s;
}

cudaStream as_stream(uintptr_t s) { return reinterpret_cast<cudaStream>(s); }
}  // namespace

bool nccl_supports(DataType dtype, ReduceOp op, double prescale, double postscale, bool reduces) {
  if (!reduces) return true;  // data movement: any dtype travels as bytes
  if (dtype == DataType::kBool || dtype == DataType::kInt16 || dtype == DataType::kUInt16) return false;
  switch (op) {
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kProduct: return prescale == 1.0 && postscale == 1.0;
    case ReduceOp::kSum: return prescale * postscale == 1.0 || floating(dtype);
    case ReduceOp::kAverage: return floating(dtype);
    default: return false;
  }
}

NcclPlane::~NcclPlane() {
  for (auto& kv : comms_) destroy(kv.second, false);
}

void NcclPlane::forget(int32_t process_set) {
  for (auto it = comms_.begin(); it != comms_.end();) {
    if (it->first.first != process_set) {
      ++it;
      continue;
    }
    destroy(it->second, false);
    it = comms_.erase(it);
  }
}

void NcclPlane::destroy(Comm& c, bool abort) {
  std::string ignored;
  if (!GpuLibrary::attempted(&ignored) || !ignored.empty()) return;
  const GpuLibrary& lib = GpuLibrary::get();
  if (c.comm) (abort ? lib.CommAbort : lib.CommDestroy)(c.comm);
  if (c.ready) lib.EventDestroy(c.ready);
  if (c.done) lib.EventDestroy(c.done);
  if (c.stream) lib.StreamDestroy(c.stream);
  c = Comm{};
}

NcclPlane::Comm& NcclPlane::comm_for(int32_t process_set, int device, Group& g) {
  auto key = std::make_pair(process_set, device);
  auto found = comms_.find(key);
  if (found != comms_.end()) return found->second;
  const GpuLibrary& lib = library();
  DeviceGuard on(lib, device);
  const int n = g.size(), me = g.rank();
  std::vector<Introduction> all(static_cast<size_t>(n));
  Introduction& mine = all[static_cast<size_t>(me)];
  std::memset(&mine, 0, sizeof mine);
  gethostname(mine.host, sizeof mine.host - 1);
  on.check(lib.DeviceGetPCIBusId(mine.bus_id, sizeof mine.bus_id - 1, device), "cudaDeviceGetPCIBusId");
  if (me == 0) {
    ncclResult e = lib.GetUniqueId(&mine.id);
    if (e != kNcclSuccess) throw TransportError(lib.nccl_error("ncclGetUniqueId", e));
  }
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    sends.push_back({p, &mine, sizeof mine});
    recvs.push_back({p, &all[static_cast<size_t>(p)], sizeof(Introduction)});
  }
  if (n > 1) g.exchange(sends, recvs);
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      const Introduction &x = all[static_cast<size_t>(a)], &y = all[static_cast<size_t>(b)];
      if (std::strncmp(x.host, y.host, sizeof x.host) == 0 && std::strncmp(x.bus_id, y.bus_id, sizeof x.bus_id) == 0)
        throw CollectiveError("ranks " + std::to_string(g.global_rank(a)) + " and " + std::to_string(g.global_rank(b)) +
                              " use the same GPU (" + x.bus_id + " on " + x.host +
                              "), which NCCL refuses: give each rank its own GPU "
                              "(torch.cuda.set_device(hvd.local_rank())), or set HOROVOD_GPU_OPERATIONS=HOST to stage "
                              "collectives on CUDA tensors through host memory");
    }
  Comm c;
  c.size = n;
  c.rank = me;
  ncclResult e = lib.CommInitRank(&c.comm, n, all[0].id, me);
  if (e != kNcclSuccess) throw TransportError(lib.nccl_error("ncclCommInitRank", e));
  auto made = comms_.emplace(key, c).first;  // from here destroy() cleans up whatever fails next
  Comm& kept = made->second;
  try {
    on.check(lib.StreamCreateWithFlags(&kept.stream, kCudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    on.check(lib.EventCreateWithFlags(&kept.ready, kCudaEventDisableTiming), "cudaEventCreateWithFlags");
    on.check(lib.EventCreateWithFlags(&kept.done, kCudaEventDisableTiming), "cudaEventCreateWithFlags");
  } catch (...) {
    destroy(kept, true);
    comms_.erase(made);
    throw;
  }
  return kept;
}

void NcclPlane::run(int32_t process_set, int device, Group& g, const DeviceOp& op,
                    const std::vector<DeviceTensor>& tensors) {
  if (op.kind != DeviceOp::kAllreduce && op.kind != DeviceOp::kReducescatter) {
    // (data movement only: checked here so a bad request fails before NCCL starts)
  } else if (!nccl_supports(op.dtype, op.op, op.prescale, op.postscale, true)) {
    throw CollectiveError(std::string("NCCL cannot run ") + reduce_op_name(op.op) + " on " + dtype_name(op.dtype) +
                          " tensors with these scale factors; such collectives are staged through host memory");
  }
  Comm& c = comm_for(process_set, device, g);
  const GpuLibrary& lib = GpuLibrary::get();
  DeviceGuard on(lib, device);
  launch(c, op, tensors);
  wait_done(c, process_set, device);
}

void NcclPlane::launch(Comm& c, const DeviceOp& op, const std::vector<DeviceTensor>& tensors) {
  const GpuLibrary& lib = GpuLibrary::get();
  const std::vector<uintptr_t> callers = distinct_streams(tensors);
  for (uintptr_t s : callers) {
    if (lib.EventRecord(c.ready, as_stream(s)) != kCudaSuccess ||
        lib.StreamWaitEvent(c.stream, c.ready, 0) != kCudaSuccess)
      throw TransportError("cannot order the NCCL stream after the caller's CUDA stream");
  }
  const bool reduces = op.kind == DeviceOp::kAllreduce || op.kind == DeviceOp::kReducescatter;
  Reduction red;
  if (reduces) red = make_reduction(lib, c.comm, op, c.size);
  const ncclDataType dt = reduces ? nccl_type(op.dtype) : kNcclUint8;
  const size_t es = dtype_size(op.dtype);
  // Data movement counts bytes; reductions count elements.
  const size_t unit = reduces ? 1 : es;
  const size_t row = op.row_elements * unit;
  const int n = c.size, me = c.rank;
  std::string failed;
  auto call = [&](const char* what, ncclResult e) {
    if (e != kNcclSuccess && failed.empty()) failed = lib.nccl_error(what, e);
  };
  auto at = [&](const void* base, size_t units) {
    return static_cast<uint8_t*>(const_cast<void*>(base)) + units * (reduces ? es : 1);
  };
  call("ncclGroupStart", lib.GroupStart());
  const DeviceTensor& t = tensors.front();
  auto rows = [&](int i) { return static_cast<size_t>(op.rows[static_cast<size_t>(i)]); };
  switch (op.kind) {
    case DeviceOp::kAllreduce:
      for (const DeviceTensor& each : tensors)
        if (each.count > 0)
          call("ncclAllReduce", lib.AllReduce(each.in, each.out, each.count, dt, red.op, c.comm, c.stream));
      break;
    case DeviceOp::kBroadcast:
      if (t.count > 0) call("ncclBroadcast", lib.Broadcast(t.in, t.out, t.count * unit, dt, op.root, c.comm, c.stream));
      break;
    case DeviceOp::kAllgather: {
      bool even = std::all_of(op.rows.begin(), op.rows.end(), [&](int64_t r) { return r == op.rows[0]; });
      if (even) {
        if (rows(0) > 0) call("ncclAllGather", lib.AllGather(t.in, t.out, rows(0) * row, dt, c.comm, c.stream));
        break;
      }
      size_t off = 0;  // uneven: every rank broadcasts its rows into its place
      for (int r = 0; r < n; ++r) {
        size_t cnt = rows(r) * row;
        if (cnt > 0)
          call("ncclBroadcast",
               lib.Broadcast(r == me ? t.in : at(t.out, off), at(t.out, off), cnt, dt, r, c.comm, c.stream));
        off += cnt;
      }
      break;
    }
    case DeviceOp::kAlltoall: {
      size_t send_off = 0, recv_off = 0;
      for (int p = 0; p < n; ++p) {
        size_t s = static_cast<size_t>(op.rows[static_cast<size_t>(me * n + p)]) * row;
        size_t r = static_cast<size_t>(op.rows[static_cast<size_t>(p * n + me)]) * row;
        if (s > 0) call("ncclSend", lib.Send(at(t.in, send_off), s, dt, p, c.comm, c.stream));
        if (r > 0) call("ncclRecv", lib.Recv(at(t.out, recv_off), r, dt, p, c.comm, c.stream));
        send_off += s;
        recv_off += r;
      }
      break;
    }
    case DeviceOp::kReducescatter: {
      bool even = std::all_of(op.rows.begin(), op.rows.end(), [&](int64_t r) { return r == op.rows[0]; });
      if (even) {
        if (rows(0) > 0)
          call("ncclReduceScatter", lib.ReduceScatter(t.in, t.out, rows(0) * row, dt, red.op, c.comm, c.stream));
        break;
      }
      size_t off = 0;  // uneven: one reduction to each rank of its rows
      for (int r = 0; r < n; ++r) {
        size_t cnt = rows(r) * row;
        if (cnt > 0) call("ncclReduce", lib.Reduce(at(t.in, off), t.out, cnt, dt, red.op, r, c.comm, c.stream));
        off += cnt;
      }
      break;
    }
  }
  call("ncclGroupEnd", lib.GroupEnd());
  if (red.created) lib.RedOpDestroy(red.op, c.comm);
  if (!failed.empty()) throw TransportError("NCCL data plane: " + failed);
  if (lib.EventRecord(c.done, c.stream) != kCudaSuccess)
    throw TransportError("cannot record the NCCL completion event");
  for (uintptr_t s : callers)
    if (lib.StreamWaitEvent(as_stream(s), c.done, 0) != kCudaSuccess)
      throw TransportError("cannot order the caller's CUDA stream after the NCCL collective");
}

void NcclPlane::wait_done(Comm& c, int32_t process_set, int device) {
  const GpuLibrary& lib = GpuLibrary::get();
  using namespace std::chrono;
  const auto deadline = steady_clock::now() + duration<double>(timeout_s_);
  auto pause = microseconds(20);
  for (;;) {
    cudaError e = lib.EventQuery(c.done);
    if (e == kCudaSuccess) return;
    std::string problem;
    ncclResult async = kNcclSuccess;
    if (e != kCudaErrorNotReady) problem = lib.cuda_error("cudaEventQuery", e);
    else if (lib.CommGetAsyncError(c.comm, &async) == kNcclSuccess && async != kNcclSuccess && async != kNcclInProgress)
      problem = lib.nccl_error("NCCL (asynchronously)", async);
    else if (steady_clock::now() > deadline)
      problem = "a collective on the GPU did not finish within " + std::to_string(static_cast<int>(timeout_s_)) +
                " s (HOROVOD_DATA_TIMEOUT_SECONDS): a peer is gone or its GPU is hung";
    if (!problem.empty()) {
      destroy(c, true);
      comms_.erase(std::make_pair(process_set, device));
      throw TransportError("NCCL data plane: " + problem);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, duration_cast<microseconds>(milliseconds(1)));
  }
}

}  // namespace hs::gpu
