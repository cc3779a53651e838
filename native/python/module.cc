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

namespace py = pybind11;
using namespace hs;

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

std::shared_ptr<Engine> engine() {
  std::lock_guard<std::mutex> l(g_mu);
  if (!g_engine) throw py::value_error(kNotInitialized);
  return g_engine;
}

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

TensorRequest make_request(int type, const std::string& name, uintptr_t in_ptr, uintptr_t out_ptr, int dtype,
                           const std::vector<int64_t>& shape, int root, int op, double prescale, double postscale,
                           int process_set, const std::vector<int64_t>& splits) {
  if (dtype < 0 || dtype >= kNumDataTypes) throw std::invalid_argument("unknown dtype code");
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("negative dimension in shape of '" + name + "'");
  TensorRequest req;
  req.meta.type = static_cast<OpType>(type);
  req.meta.name = name;
  req.meta.dtype = static_cast<DataType>(dtype);
  req.meta.shape = shape;
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

// Returns (error_kind, message, data, shape, splits, value); data is a numpy uint8 array that owns
// the core's result buffer (moved, not copied), or None.
py::tuple take(Engine& e, int64_t h) {
  HandleError kind;
  std::string message;
  HandleResult r = e.handles().take(h, &kind, &message);
  py::object data = py::none();
  if (r.has_data) {
    auto* owned = new std::vector<uint8_t>(std::move(r.data));
    py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<uint8_t>*>(p); });
    data = py::array_t<uint8_t>({static_cast<py::ssize_t>(owned->size())}, {1}, owned->data(), free_when_done);
  }
  return py::make_tuple(static_cast<int>(kind), message, data, py::tuple(py::cast(r.shape)), py::cast(r.splits),
                        r.value);
}
// A completed handle's outcome for Python. The common one (success, no data, no value) is a bare
// True: no tuple, shape or splits objects per handle, which also spares the cyclic GC work in a
// training step. Otherwise take()'s tuple.
py::object outcome(Engine& e, int64_t h) {
  if (e.handles().take_if_plain(h)) return py::bool_(true);
  return take(e, h);
}

// The latency paths of allreduce, written against the C API (METH_FASTCALL) rather than bound
// with pybind11, whose generic dispatch of nine arguments cost about a tenth of a 4 KiB
// allreduce between two ranks (and as much again per gradient in DistributedOptimizer's step):
//   run_allreduce(name, in_ptr, out_ptr, dtype, shape, op, prescale, postscale, process_set)
//     enqueue + wait_take for a caller that blocks at once: what wait_take returns, or on
//     timeout the handle (an int) to go on waiting for.
//   enqueue_allreduce(same arguments) -> handle.
bool arg_long(PyObject* o, const char* what, long long* out) {
  *out = PyLong_AsLongLong(o);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "allreduce: %s must be an int", what);
    return false;
  }
  return true;
}

bool arg_double(PyObject* o, const char* what, double* out) {
  *out = PyFloat_AsDouble(o);
  if (*out == -1.0 && PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "allreduce: %s must be a float", what);
    return false;
  }
  return true;
}

// A str argument as UTF-8 (borrowed from the str object); false with a TypeError otherwise.
bool arg_name(PyObject* o, const char* what, const char** name, Py_ssize_t* len) {
  *name = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, len) : nullptr;
  if (!*name && !PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s must be a str", what);
  return *name != nullptr;
}

bool arg_shape(PyObject* o, std::vector<int64_t>* shape) {
  // torch.Size is a tuple subclass, which PySequence_Fast would copy into a new list on every
  // call: read any tuple in place.
  PyObject* seq =
      PyTuple_Check(o) ? (Py_INCREF(o), o) : PySequence_Fast(o, "allreduce: shape must be a tuple or list of ints");
  if (!seq) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  shape->resize(static_cast<size_t>(n));
  bool ok = true;
  for (Py_ssize_t i = 0; i < n && ok; ++i) {
    long long d;
    ok = arg_long(items[i], "every dimension of shape", &d);
    (*shape)[static_cast<size_t>(i)] = d;
  }
  Py_DECREF(seq);
  return ok;
}

// The nine arguments -> a request (false with a Python error set); throws std::invalid_argument
// for values make_request rejects.
bool parse_allreduce(PyObject* const* args, Py_ssize_t nargs, TensorRequest* req) {
  if (nargs != 9) {
    PyErr_Format(PyExc_TypeError, "allreduce takes 9 arguments (%zd given)", nargs);
    return false;
  }
  const char* name;
  Py_ssize_t name_len;
  if (!arg_name(args[0], "allreduce: name", &name, &name_len)) return false;
  unsigned long long in_ptr = PyLong_AsUnsignedLongLong(args[1]);
  if (PyErr_Occurred()) return false;
  unsigned long long out_ptr = PyLong_AsUnsignedLongLong(args[2]);
  if (PyErr_Occurred()) return false;
  long long dtype, op, process_set;
  double prescale, postscale;
  std::vector<int64_t> shape;
  if (!arg_long(args[3], "dtype", &dtype) || !arg_shape(args[4], &shape) || !arg_long(args[5], "op", &op) ||
      !arg_double(args[6], "prescale", &prescale) || !arg_double(args[7], "postscale", &postscale) ||
      !arg_long(args[8], "process_set", &process_set))
    return false;
  static const std::vector<int64_t> no_splits;
  *req = make_request(static_cast<int>(OpType::kAllreduce), std::string(name, name_len), in_ptr, out_ptr,
                      static_cast<int>(dtype), shape, 0, static_cast<int>(op), prescale, postscale,
                      static_cast<int>(process_set), no_splits);
  return true;
}

// The engine for one latency-path call, or null with a ValueError set; shutdown() does not let the
// engine go while this lives. (Counted before the load, both seq_cst: shutdown() clears the pointer
// and then reads the count, so either it sees this call or this call sees no engine.)
class FastEngine {
 public:
  FastEngine() {
    g_fast_calls.fetch_add(1);
    e_ = g_engine_fast.load();
    if (!e_) PyErr_SetString(PyExc_ValueError, kNotInitialized);
  }
  ~FastEngine() { g_fast_calls.fetch_sub(1); }
  FastEngine(const FastEngine&) = delete;
  FastEngine& operator=(const FastEngine&) = delete;
  Engine* get() const { return e_; }

 private:
  Engine* e_ = nullptr;
};

// Runs body() (a new reference, or nullptr with a Python error set), turning a C++ exception
// into the matching Python one.
template <class F>
PyObject* with_python_errors(F&& body) {
  try {
    return body();
  } catch (const std::invalid_argument& ex) {
    PyErr_SetString(PyExc_ValueError, ex.what());
  } catch (const std::exception& ex) {
    PyErr_SetString(PyExc_RuntimeError, ex.what());
  }
  return nullptr;
}

PyObject* run_allreduce(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return with_python_errors([&]() -> PyObject* {
    TensorRequest req;
    if (!parse_allreduce(args, nargs, &req)) return nullptr;
    FastEngine fast;
    Engine* e = fast.get();
    if (!e) return nullptr;
    int64_t h = 0;
    bool done;
    {
      py::gil_scoped_release nogil;  // (reacquired on the way out, exceptions included)
      done = e->run(std::move(req), 1.0, &h);
    }
    if (!done) return PyLong_FromLongLong(h);
    return outcome(*e, h).release().ptr();
  });
}

PyObject* enqueue_allreduce(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return with_python_errors([&]() -> PyObject* {
    TensorRequest req;
    if (!parse_allreduce(args, nargs, &req)) return nullptr;
    FastEngine fast;
    if (!fast.get()) return nullptr;
    return PyLong_FromLongLong(fast.get()->enqueue(std::move(req)));
  });
}

// enqueue_allreduce_group(name, in_ptrs, out_ptrs, dtype, shapes, op, prescale, postscale,
//                         process_set) -> handle: a grouped allreduce of tensors of one dtype as one
// packed request (see TensorRequest::members). Every member is checked before anything is queued.
PyObject* enqueue_allreduce_group(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_Format(PyExc_TypeError, "enqueue_allreduce_group takes 9 arguments (%zd given)", nargs);
    return nullptr;
  }
  struct Lists {  // the three per-member arguments as fast sequences, released on every way out
    PyObject* seq[3] = {nullptr, nullptr, nullptr};
    ~Lists() {
      for (PyObject* q : seq) Py_XDECREF(q);
    }
  } lists;
  const char* const what[] = {"in_ptrs", "out_ptrs", "shapes"};
  const int list_arg[] = {1, 2, 4};
  Py_ssize_t n = -1;
  for (int k = 0; k < 3; ++k) {
    lists.seq[k] = PySequence_Fast(args[list_arg[k]], "enqueue_allreduce_group: expected lists");
    if (!lists.seq[k]) return nullptr;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(lists.seq[k]);
    if (n >= 0 && len != n) {
      PyErr_Format(PyExc_ValueError, "grouped_allreduce: %s has %zd entries, in_ptrs has %zd", what[k], len, n);
      return nullptr;
    }
    n = len;
  }
  return with_python_errors([&]() -> PyObject* {
    const char* name;
    Py_ssize_t name_len;
    if (!arg_name(args[0], "grouped_allreduce: name", &name, &name_len)) return nullptr;
    if (name_len == 0) throw std::invalid_argument("grouped_allreduce: name must be a non-empty str");
    if (n == 0) throw std::invalid_argument("grouped_allreduce needs at least one tensor");
    long long dtype, op, process_set;
    double prescale, postscale;
    if (!arg_long(args[3], "dtype", &dtype) || !arg_long(args[5], "op", &op) ||
        !arg_double(args[6], "prescale", &prescale) || !arg_double(args[7], "postscale", &postscale) ||
        !arg_long(args[8], "process_set", &process_set))
      return nullptr;
    if (dtype < 0 || dtype >= kNumDataTypes) throw std::invalid_argument("unknown dtype code");
    const size_t es = dtype_size(static_cast<DataType>(dtype));
    std::vector<PackedMember> members(static_cast<size_t>(n));
    std::vector<int64_t> member_shapes, shape;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
      unsigned long long in_ptr = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(lists.seq[0], i));
      if (PyErr_Occurred()) return nullptr;
      unsigned long long out_ptr = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(lists.seq[1], i));
      if (PyErr_Occurred()) return nullptr;
      if (!arg_shape(PySequence_Fast_GET_ITEM(lists.seq[2], i), &shape)) return nullptr;
      int64_t count = 1;
      for (int64_t d : shape) {
        if (d < 0)
          throw std::invalid_argument("grouped_allreduce '" + std::string(name, name_len) + "': member " +
                                      std::to_string(i) + " has a negative dimension");
        count *= d;
      }
      if (count > 0 && (in_ptr == 0 || out_ptr == 0))
        throw std::invalid_argument("grouped_allreduce '" + std::string(name, name_len) + "': member " +
                                    std::to_string(i) + " has a null buffer");
      members[static_cast<size_t>(i)] = PackedMember{reinterpret_cast<const void*>(in_ptr),
                                                     reinterpret_cast<void*>(out_ptr), static_cast<size_t>(count) * es};
      append_member_shape(&member_shapes, shape);
      total += count;
    }
    TensorRequest req = make_request(static_cast<int>(OpType::kAllreduce), std::string(name, name_len), 0, 0,
                                     static_cast<int>(dtype), {total}, 0, static_cast<int>(op), prescale, postscale,
                                     static_cast<int>(process_set), member_shapes);
    req.members = std::move(members);
    FastEngine fast;
    if (!fast.get()) return nullptr;
    return PyLong_FromLongLong(fast.get()->enqueue(std::move(req)));
  });
}

// enqueue_allreduce_batch(names, ptrs, dtypes, shapes, op, prescale, postscale, process_set)
//   -> [handle]: in-place allreduces of many tensors, each its own request as enqueue_allreduce
// makes it, queued together (Engine::enqueue_batch). Every argument is checked before anything is
// queued. DistributedOptimizer's step, once per step for every gradient.
PyObject* enqueue_allreduce_batch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 8) {
    PyErr_Format(PyExc_TypeError, "enqueue_allreduce_batch takes 8 arguments (%zd given)", nargs);
    return nullptr;
  }
  struct Lists {  // the four per-tensor arguments as fast sequences, released on every way out
    PyObject* seq[4] = {nullptr, nullptr, nullptr, nullptr};
    ~Lists() {
      for (PyObject* q : seq) Py_XDECREF(q);
    }
  } lists;
  Py_ssize_t n = -1;
  for (int k = 0; k < 4; ++k) {
    lists.seq[k] = PySequence_Fast(args[k], "enqueue_allreduce_batch: names, ptrs, dtypes and shapes must be lists");
    if (!lists.seq[k]) return nullptr;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(lists.seq[k]);
    if (n >= 0 && len != n) {
      PyErr_SetString(PyExc_ValueError, "enqueue_allreduce_batch: names, ptrs, dtypes and shapes differ in length");
      return nullptr;
    }
    n = len;
  }
  return with_python_errors([&]() -> PyObject* {
    long long op, process_set;
    double prescale, postscale;
    if (!arg_long(args[4], "op", &op) || !arg_double(args[5], "prescale", &prescale) ||
        !arg_double(args[6], "postscale", &postscale) || !arg_long(args[7], "process_set", &process_set))
      return nullptr;
    static const std::vector<int64_t> no_splits;
    std::vector<TensorRequest> reqs;
    reqs.reserve(static_cast<size_t>(n));
    std::vector<int64_t> shape;
    for (Py_ssize_t i = 0; i < n; ++i) {
      const char* name;
      Py_ssize_t name_len;
      long long dtype;
      if (!arg_name(PySequence_Fast_GET_ITEM(lists.seq[0], i), "allreduce: name", &name, &name_len)) return nullptr;
      unsigned long long ptr = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(lists.seq[1], i));
      if (PyErr_Occurred()) return nullptr;
      if (!arg_long(PySequence_Fast_GET_ITEM(lists.seq[2], i), "dtype", &dtype) ||
          !arg_shape(PySequence_Fast_GET_ITEM(lists.seq[3], i), &shape))
        return nullptr;
      reqs.push_back(make_request(static_cast<int>(OpType::kAllreduce), std::string(name, name_len), ptr, ptr,
                                  static_cast<int>(dtype), shape, 0, static_cast<int>(op), prescale, postscale,
                                  static_cast<int>(process_set), no_splits));
    }
    FastEngine fast;
    if (!fast.get()) return nullptr;
    std::vector<int64_t> handles = fast.get()->enqueue_batch(std::move(reqs));
    PyObject* out = PyList_New(static_cast<Py_ssize_t>(handles.size()));
    if (!out) return nullptr;
    for (size_t i = 0; i < handles.size(); ++i) {
      PyObject* h = PyLong_FromLongLong(handles[i]);
      if (!h) {
        Py_DECREF(out);
        return nullptr;
      }
      PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), h);
    }
    return out;
  });
}

template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t)>
PyMethodDef fastcall_def(const char* name, const char* doc) {
  return {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(F)), METH_FASTCALL, doc};
}

PyMethodDef g_run_allreduce_def = fastcall_def<run_allreduce>(
    "run_allreduce",
    "run_allreduce(name, in_ptr, out_ptr, dtype, shape, op, prescale, postscale, process_set): "
    "enqueue + wait_take of an allreduce.");
PyMethodDef g_enqueue_allreduce_group_def = fastcall_def<enqueue_allreduce_group>(
    "enqueue_allreduce_group",
    "enqueue_allreduce_group(name, in_ptrs, out_ptrs, dtype, shapes, op, prescale, postscale, "
    "process_set) -> handle: one packed request for the whole group.");
PyMethodDef g_enqueue_allreduce_batch_def = fastcall_def<enqueue_allreduce_batch>(
    "enqueue_allreduce_batch",
    "enqueue_allreduce_batch(names, ptrs, dtypes, shapes, op, prescale, postscale, process_set) -> [handle]: "
    "in-place allreduces of many tensors, each its own request, queued together.");
PyMethodDef g_enqueue_allreduce_def =
    fastcall_def<enqueue_allreduce>("enqueue_allreduce",
                                    "enqueue_allreduce(name, in_ptr, out_ptr, dtype, shape, op, prescale, postscale, "
                                    "process_set) -> handle.");
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
  for (PyMethodDef* def :
       {&g_run_allreduce_def, &g_enqueue_allreduce_def, &g_enqueue_allreduce_group_def, &g_enqueue_allreduce_batch_def})
    m.add_object(def->ml_name,
                 py::reinterpret_steal<py::object>(PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr())));
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
    d["hierarchical_allreduces"] = s.hierarchical_allreduces.load();
    d["hierarchical_allgathers"] = s.hierarchical_allgathers.load();
    d["nccl_collectives"] = s.nccl_collectives.load();
    d["single_copy_bytes"] = e->single_copy_bytes();
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
  py::register_exception<TransportError>(m, "TransportError", PyExc_RuntimeError);
}
