// The Python face of the core: one process-wide engine, raw-pointer collectives, handles.
// No framework types cross this boundary; horovod_spark.torch / .tensorflow adapt tensors to it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "common/config.h"
#include "common/errors.h"
#include "engine/engine.h"
#include "gpu/gpu_library.h"
#include "gpu/nccl_plane.h"
#include "python/engine_access.h"
#include "python/fast_calls.h"

namespace py = pybind11;
using namespace hs;
using namespace hs::binding;

namespace {
// The engine lives as long as any call uses it: shutdown() may run on one Python thread while
// others wait inside the engine with the GIL released (at interpreter exit, atexit's shutdown()
// while daemon threads wait on collectives), so every call holds a reference for its duration.
std::mutex g_mu;
std::shared_ptr<Engine> g_engine;
// g_engine.get(), readable without g_mu on the latency path (set and cleared under g_mu). Those
// calls hold no reference; they count themselves in g_fast_calls, which shutdown() waits to drain.
std::atomic<Engine*> g_engine_fast{nullptr};
std::atomic<int> g_fast_calls{0};
const char* const kNotInitialized = "horovod_spark has not been initialized; call hvd.init() first";
}  // namespace

namespace hs {
namespace binding {

std::shared_ptr<Engine> engine() {
  std::lock_guard<std::mutex> l(g_mu);
  if (!g_engine) throw py::value_error(kNotInitialized);
  return g_engine;
}

TensorRequest make_request(int type, std::string name, uintptr_t in_ptr, uintptr_t out_ptr, int dtype,
                           std::vector<int64_t> shape, int root, int op, double prescale, double postscale,
                           int process_set, const std::vector<int64_t>& splits) {
  if (dtype < 0 || dtype >= kNumDataTypes) throw std::invalid_argument("unknown dtype code");
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("negative dimension in shape of '" + name + "'");
  TensorRequest req;
  req.meta.type = static_cast<OpType>(type);
  req.meta.name = std::move(name);
  req.meta.dtype = static_cast<DataType>(dtype);
  req.meta.shape = std::move(shape);
  req.meta.root = root;
  req.meta.op = static_cast<ReduceOp>(op);
  req.meta.prescale = prescale;
  req.meta.postscale = postscale;
  req.meta.process_set = process_set;
  req.meta.splits = splits;
  req.in = reinterpret_cast<const void*>(in_ptr);
  req.out = reinterpret_cast<void*>(out_ptr);
  return req;
}

FastEngine::FastEngine() {
  g_fast_calls.fetch_add(1);
  e_ = g_engine_fast.load();
  if (!e_) PyErr_SetString(PyExc_ValueError, kNotInitialized);
}

FastEngine::~FastEngine() { g_fast_calls.fetch_sub(1); }

py::tuple take(Engine& e, int64_t h) {
  HandleError kind;
  std::string message;
  HandleResult r = e.handles().take(h, &kind, &message);
  py::object data = py::none();
  if (r.has_data) {
    auto* owned = new ResultBuffer(std::move(r.data));  // back to the pool when the array dies
    py::capsule free_when_done(owned, [](void* p) { delete static_cast<ResultBuffer*>(p); });
    data = py::array_t<uint8_t>({static_cast<py::ssize_t>(owned->size())}, {1}, owned->data(), free_when_done);
  }
  return py::make_tuple(static_cast<int>(kind), message, data, py::tuple(py::cast(r.shape)), py::cast(r.splits),
                        r.value);
}

py::object outcome(Engine& e, int64_t h) {
  if (e.handles().take_if_plain(h)) return py::bool_(true);
  return take(e, h);
}

}  // namespace binding
}  // namespace hs

namespace {

int create(int rank, int size, const std::string& bind_host) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_engine) throw std::runtime_error("horovod_spark is already initialized");
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("invalid rank " + std::to_string(rank) + " for size " + std::to_string(size));
  Config cfg = Config::from_env();
  g_engine.reset(new Engine(rank, size, cfg, bind_host));
  g_engine_fast = g_engine.get();
  return g_engine->listen_port();
}

void start(const std::vector<std::tuple<std::string, int, std::string>>& peers, const std::string& token,
           uintptr_t mpi_comm) {
  std::shared_ptr<Engine> e = engine();
  std::vector<PeerAddress> addrs;
  for (const auto& [host, port, host_id] : peers) addrs.push_back({host, port, host_id});
  try {
    py::gil_scoped_release nogil;
    e->start(addrs, token, mpi_comm);
  } catch (...) {
    std::lock_guard<std::mutex> l(g_mu);
    g_engine_fast = nullptr;
    g_engine.reset();
    throw;
  }
}

void shutdown() {
  std::shared_ptr<Engine> e;  // (released last, with the GIL held again)
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_engine_fast = nullptr;
    e = std::move(g_engine);
  }
  if (!e) return;
  py::gil_scoped_release nogil;
  e->shutdown();
  // Latency-path calls that took the plain pointer before it was cleared end quickly now that the
  // engine has stopped; it must outlive them.
  while (g_fast_calls.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

int64_t enqueue(int type, const std::string& name, uintptr_t in_ptr, uintptr_t out_ptr, int dtype,
                const std::vector<int64_t>& shape, int root, int op, double prescale, double postscale, int process_set,
                const std::vector<int64_t>& splits) {
  return engine()->enqueue(
      make_request(type, name, in_ptr, out_ptr, dtype, shape, root, op, prescale, postscale, process_set, splits));
}

// A collective on CUDA memory for the NCCL data plane (RequestMeta::device): outputs preallocated.
int64_t enqueue_device(int type, const std::string& name, uintptr_t in_ptr, uintptr_t out_ptr, int dtype,
                       const std::vector<int64_t>& shape, int root, int op, double prescale, double postscale,
                       int process_set, const std::vector<int64_t>& splits, int device, uintptr_t stream) {
  std::string error;
  if (!gpu::GpuLibrary::attempted(&error) || !error.empty())
    throw std::runtime_error(error.empty() ? "the NCCL data plane was never loaded (horovod_spark.common.nccl)"
                                           : error);
  if (device < 0) throw std::invalid_argument("device must be a CUDA device index, got " + std::to_string(device));
  TensorRequest req =
      make_request(type, name, in_ptr, out_ptr, dtype, shape, root, op, prescale, postscale, process_set, splits);
  req.meta.device = true;
  req.device = device;
  req.stream = stream;
  return engine()->enqueue(std::move(req));
}

// The core's ConfigError and TransportError reach Python as the classes of horovod_spark.exceptions,
// which users catch and which must not import this module. The classes live as long as the process
// (a translator may run at interpreter exit), so their references are kept, never released.
void register_python_exceptions(py::module_& m) {
  py::module_ exceptions = py::module_::import("horovod_spark.exceptions");
  static PyObject* config_error = py::object(exceptions.attr("ConfigError")).release().ptr();
  static PyObject* transport_error = py::object(exceptions.attr("TransportError")).release().ptr();
  m.attr("ConfigError") = py::handle(config_error);
  m.attr("TransportError") = py::handle(transport_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ConfigError& ex) {
      PyErr_SetString(config_error, ex.what());
    } catch (const TransportError& ex) {
      PyErr_SetString(transport_error, ex.what());
    }
  });
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "horovod_spark native collective core";
  m.def("create", &create,
        "Create the engine and listen for peers on bind_host ('' for every interface); "
        "returns the port.",
        py::arg("rank"), py::arg("size"), py::arg("bind_host") = "");
  m.def("start", &start, "Connect to every peer and start the engine thread.", py::arg("peers"), py::arg("token"),
        py::arg("mpi_comm") = 0);
  m.def("uses_mpi", [] { return engine()->uses_mpi(); });
  m.def("shutdown", &shutdown);
  m.def("is_created", [] {
    std::lock_guard<std::mutex> l(g_mu);
    return g_engine != nullptr;
  });
  m.def("rank", [] { return engine()->rank(); });
  m.def("size", [] { return engine()->size(); });
  m.def("local_rank", [] { return engine()->local_rank(); });
  m.def("local_size", [] { return engine()->local_size(); });
  m.def(
      "cpu_placement",
      [] {
        std::shared_ptr<Engine> e = engine();
        py::dict d;
        d["local_cpus"] = e->local_cpus();
        d["shared"] = e->ranks_share_cpus();
        return d;
      },
      "The CPUs this host's ranks may use between them, and whether the ranks share CPUs.");
  m.def("enqueue", &enqueue);
  m.def("enqueue_device", &enqueue_device, "enqueue() for CUDA memory through NCCL, plus device and stream.");
  m.def(
      "gpu_load",
      [](const std::vector<std::string>& cudart, const std::vector<std::string>& nccl) {
        py::gil_scoped_release nogil;
        return gpu::GpuLibrary::load(cudart, nccl);
      },
      "Open libcudart and libnccl (once per process): '' or why the NCCL data plane cannot run here.");
  m.def("gpu_info", []() -> py::object {
    std::string error;
    if (!gpu::GpuLibrary::attempted(&error)) return py::none();
    const gpu::GpuLibrary& lib = gpu::GpuLibrary::found();
    py::dict d;
    d["error"] = error;
    d["cudart_path"] = lib.cudart_path;
    d["nccl_path"] = lib.nccl_path;
    d["nccl_version"] = lib.nccl_version;
    d["device_count"] = lib.device_count;
    return d;
  });
  m.def("nccl_supports", [](int dtype, int op, double prescale, double postscale, bool reduces) {
    if (dtype < 0 || dtype >= kNumDataTypes) throw std::invalid_argument("unknown dtype code");
    return gpu::nccl_supports(static_cast<DataType>(dtype), static_cast<ReduceOp>(op), prescale, postscale, reduces);
  });
  m.def(
      "check_names_free",
      [](int32_t process_set, const std::vector<std::string>& names) {
        engine()->check_names_free(process_set, names);
      },
      "ValueError when one of the names is already in flight in the process set (or repeats).");
  m.def(
      "wait_plain",
      [](const std::vector<int64_t>& handles, double timeout) {
        std::shared_ptr<Engine> e = engine();
        py::gil_scoped_release nogil;
        size_t done = 0;
        while (done < handles.size() && e->wait(handles[done], timeout) && e->handles().take_if_plain(handles[done]))
          ++done;
        return done;
      },
      "Waits for the handles in order and takes each that succeeded with no result; returns how many "
      "it took. It stops at the first that fails, has a result, or is not done within timeout seconds "
      "(each): wait_take that one and the rest.");
  m.def("poll", [](int64_t h) { return engine()->handles().poll(h); });
  m.def("wait", [](int64_t h, double timeout) {
    std::shared_ptr<Engine> e = engine();
    py::gil_scoped_release nogil;
    return e->wait(h, timeout);
  });
  m.def("take", [](int64_t h) { return take(*engine(), h); });
  binding::add_fast_calls(m);
  m.def("wait_take", [](int64_t h, double timeout) -> py::object {
    std::shared_ptr<Engine> e = engine();
    bool done;
    {
      py::gil_scoped_release nogil;
      done = e->wait(h, timeout);
    }
    if (!done) return py::none();
    return outcome(*e, h);
  });
  m.def("process_set_ranks", [](int32_t id) -> py::object {
    std::vector<int32_t> ranks;
    if (!engine()->process_set_ranks(id, &ranks)) return py::none();
    return py::cast(ranks);
  });
  m.def("process_set_ids", [] { return engine()->process_set_ids(); });
  m.def(
      "hierarchical",
      [](int32_t process_set) {
        std::shared_ptr<Engine> e = engine();
        py::dict d;
        d["allreduce"] = e->hierarchical(process_set, OpType::kAllreduce);
        d["allgather"] = e->hierarchical(process_set, OpType::kAllgather);
        return d;
      },
      "Whether allreduce and allgather of the process set run in two levels (within hosts, then across).");
  m.def("start_timeline", [](const std::string& path, bool mark) { engine()->timeline().start(path, mark); });
  m.def("stop_timeline", [] { engine()->timeline().stop(); });
  m.def("stats", [] {
    std::shared_ptr<Engine> e = engine();
    auto& s = e->stats();
    py::dict d;
    d["requests_full"] = s.requests_full.load();
    d["requests_cached"] = s.requests_cached.load();
    d["responses"] = s.responses.load();
    d["responses_cached"] = s.responses_cached.load();
    d["fused_tensors"] = s.fused_tensors.load();
    d["scattered_allreduces"] = s.scattered_allreduces.load();
    d["speculative_sent"] = s.speculative_sent.load();
    d["speculative_done"] = s.speculative_done.load();
    d["caller_lane_done"] = s.caller_lane_done.load();
    d["hierarchical_allreduces"] = s.hierarchical_allreduces.load();
    d["hierarchical_allgathers"] = s.hierarchical_allgathers.load();
    d["nccl_collectives"] = s.nccl_collectives.load();
    d["single_copy_bytes"] = e->single_copy_bytes();
    d["shared_copy_bytes"] = e->shared_copy_bytes();
    d["idle_result_bytes"] = static_cast<int64_t>(idle_result_bytes());
    return d;
  });
  m.def(
      "autotune",
      [] {
        const TuningState t = engine()->tuning();
        py::dict d;
        d["enabled"] = t.enabled;
        d["searching"] = t.searching;
        d["trials"] = t.trial;
        d["fusion_threshold"] = t.point.fusion_threshold;
        d["response_cache"] = t.point.response_cache;
        return d;
      },
      "Autotune's setting in force (the final choice once searching is false) and its progress.");
  m.def("config", [] {
    Config c = Config::from_env();
    py::dict d;
    d["fusion_threshold"] = c.fusion_threshold;
    d["cycle_time_ms"] = c.cycle_time_ms;
    d["cache_capacity"] = c.cache_capacity;
    d["stall_check_seconds"] = c.stall_check_seconds;
    d["stall_shutdown_seconds"] = c.stall_shutdown_seconds;
    d["stall_check_disable"] = c.stall_check_disable;
    d["process_set_timeout_seconds"] = c.process_set_timeout_seconds;
    d["timeline_path"] = c.timeline_path;
    d["timeline_mark_cycles"] = c.timeline_mark_cycles;
    d["data_timeout_seconds"] = c.data_timeout_seconds;
    d["start_timeout_seconds"] = c.start_timeout_seconds;
    d["shm_disable"] = c.shm_disable;
    d["data_plane_auth"] = c.data_plane_auth;
    d["yield_when_idle"] = c.yield_when_idle;
    d["shm_ring_bytes"] = c.shm_ring_bytes;
    d["shm_single_copy_bytes"] = c.shm_single_copy_bytes;
    d["speculative_allreduce"] = c.speculative_allreduce;
    d["hierarchical_allreduce"] = Config::switch_name(c.hierarchical_allreduce);
    d["hierarchical_allgather"] = Config::switch_name(c.hierarchical_allgather);
    d["autotune"] = c.autotune;
    d["autotune_log"] = c.autotune_log;
    d["autotune_warmup_samples"] = c.autotune_warmup_samples;
    d["autotune_steps_per_sample"] = c.autotune_steps_per_sample;
    return d;
  });
  register_python_exceptions(m);
}
