// The latency paths of the binding (see fast_calls.h).
#include "python/fast_calls.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "python/engine_access.h"

namespace py = pybind11;

namespace hs {
namespace binding {

namespace {
// The calls:
//   run_allreduce(name, in_ptr, out_ptr, dtype, shape, op, prescale, postscale, process_set)
//     enqueue + wait_take for a caller that blocks at once: what wait_take returns, or on
//     timeout the handle (an int) to go on waiting for.
//   enqueue_allreduce(same arguments) -> handle.
//   run_broadcast, run_allgather, run_alltoall, run_reducescatter: run_allreduce's counterparts
//     (their arguments are listed with them below).
// `call` names the collective in the messages of bad arguments.
bool arg_long(PyObject* o, const char* call, const char* what, long long* out) {
  *out = PyLong_AsLongLong(o);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be an int", call, what);
    return false;
  }
  return true;
}

bool arg_double(PyObject* o, const char* call, const char* what, double* out) {
  *out = PyFloat_AsDouble(o);
  if (*out == -1.0 && PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be a float", call, what);
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

bool arg_shape(PyObject* o, const char* call, std::vector<int64_t>* shape) {
  // torch.Size is a tuple subclass, which PySequence_Fast would copy into a new list on every
  // call: read any tuple in place.
  PyObject* seq = PyTuple_Check(o) ? (Py_INCREF(o), o) : PySequence_Fast(o, "");
  if (!seq) {
    PyErr_Format(PyExc_TypeError, "%s: shape must be a tuple or list of ints", call);
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  shape->resize(static_cast<size_t>(n));
  bool ok = true;
  for (Py_ssize_t i = 0; i < n && ok; ++i) {
    long long d;
    ok = arg_long(items[i], call, "every dimension of shape", &d);
    (*shape)[static_cast<size_t>(i)] = d;
  }
  Py_DECREF(seq);
  return ok;
}

bool arg_ptr(PyObject* o, unsigned long long* out) {
  *out = PyLong_AsUnsignedLongLong(o);
  return !PyErr_Occurred();
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
  if (!arg_long(args[3], "allreduce", "dtype", &dtype) || !arg_shape(args[4], "allreduce", &shape) ||
      !arg_long(args[5], "allreduce", "op", &op) || !arg_double(args[6], "allreduce", "prescale", &prescale) ||
      !arg_double(args[7], "allreduce", "postscale", &postscale) ||
      !arg_long(args[8], "allreduce", "process_set", &process_set))
    return false;
  static const std::vector<int64_t> no_splits;
  *req = make_request(static_cast<int>(OpType::kAllreduce), std::string(name, name_len), in_ptr, out_ptr,
                      static_cast<int>(dtype), std::move(shape), 0, static_cast<int>(op), prescale, postscale,
                      static_cast<int>(process_set), no_splits);
  return true;
}

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

// Engine::run for a parsed request (inside with_python_errors): what wait_take returns, or on
// timeout the handle to go on waiting for.
PyObject* run_request(TensorRequest req) {
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
  if (h == Engine::kRanByCaller) Py_RETURN_TRUE;  // (outcome()'s answer for a plain success)
  return outcome(*e, h).release().ptr();
}

PyObject* run_allreduce(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return with_python_errors([&]() -> PyObject* {
    TensorRequest req;
    if (!parse_allreduce(args, nargs, &req)) return nullptr;
    return run_request(std::move(req));
  });
}

bool arg_count(const char* call, Py_ssize_t expected, Py_ssize_t given) {
  if (given == expected) return true;
  PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", call, expected, given);
  return false;
}

// The arguments every run_* call of the data collectives starts with: name, in_ptr, out_ptr.
struct Buffers {
  std::string name;
  unsigned long long in_ptr = 0, out_ptr = 0;
  bool parse(PyObject* const* args, const char* what_name) {
    const char* s;
    Py_ssize_t len;
    if (!arg_name(args[0], what_name, &s, &len)) return false;
    name.assign(s, static_cast<size_t>(len));
    return arg_ptr(args[1], &in_ptr) && arg_ptr(args[2], &out_ptr);
  }
};

const std::vector<int64_t> kNoSplits;

// run_broadcast(name, in_ptr, out_ptr, dtype, shape, root, process_set): root's data into out
// (in == out in place; root is the index within the set).
PyObject* run_broadcast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return with_python_errors([&]() -> PyObject* {
    const char* call = "broadcast";
    Buffers b;
    long long dtype, root, process_set;
    std::vector<int64_t> shape;
    if (!arg_count("run_broadcast", 7, nargs) || !b.parse(args, "broadcast: name") ||
        !arg_long(args[3], call, "dtype", &dtype) || !arg_shape(args[4], call, &shape) ||
        !arg_long(args[5], call, "root", &root) || !arg_long(args[6], call, "process_set", &process_set))
      return nullptr;
    return run_request(make_request(static_cast<int>(OpType::kBroadcast), b.name, b.in_ptr, b.out_ptr,
                                    static_cast<int>(dtype), shape, static_cast<int>(root), 0, 1.0, 1.0,
                                    static_cast<int>(process_set), kNoSplits));
  });
}

// run_allgather(name, in_ptr, out_ptr, out_bytes, dtype, shape, process_set): the result goes to
// out when it has out_bytes bytes (out_ptr 0: always to memory of its own, as allgather_async's).
PyObject* run_allgather(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return with_python_errors([&]() -> PyObject* {
    const char* call = "allgather";
    Buffers b;
    long long out_bytes, dtype, process_set;
    std::vector<int64_t> shape;
    if (!arg_count("run_allgather", 7, nargs) || !b.parse(args, "allgather: name") ||
        !arg_long(args[3], call, "out_bytes", &out_bytes) || !arg_long(args[4], call, "dtype", &dtype) ||
        !arg_shape(args[5], call, &shape) || !arg_long(args[6], call, "process_set", &process_set))
      return nullptr;
    TensorRequest req =
        make_request(static_cast<int>(OpType::kAllgather), b.name, b.in_ptr, b.out_ptr, static_cast<int>(dtype), shape,
                     0, 0, 1.0, 1.0, static_cast<int>(process_set), kNoSplits);
    req.out_bytes = static_cast<size_t>(std::max(0LL, out_bytes));
    return run_request(std::move(req));
  });
}

// run_alltoall(name, in_ptr, out_ptr, out_bytes, dtype, shape, splits, process_set): splits None
// (dim 0 split evenly) or a list of ints; the result goes to out as run_allgather's does, and the
// received splits come with it only when splits were given.
PyObject* run_alltoall(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return with_python_errors([&]() -> PyObject* {
    const char* call = "alltoall";
    Buffers b;
    long long out_bytes, dtype, process_set;
    std::vector<int64_t> shape, splits;
    if (!arg_count("run_alltoall", 8, nargs) || !b.parse(args, "alltoall: name") ||
        !arg_long(args[3], call, "out_bytes", &out_bytes) || !arg_long(args[4], call, "dtype", &dtype) ||
        !arg_shape(args[5], call, &shape) || !arg_long(args[7], call, "process_set", &process_set))
      return nullptr;
    const bool splits_given = args[6] != Py_None;
    if (splits_given) {
      if (!arg_shape(args[6], call, &splits)) return nullptr;
      for (int64_t s : splits)
        if (s < 0) {
          PyErr_Format(PyExc_ValueError, "alltoall splits must be non-negative, got %R", args[6]);
          return nullptr;
        }
    }
    TensorRequest req =
        make_request(static_cast<int>(OpType::kAlltoall), b.name, b.in_ptr, b.out_ptr, static_cast<int>(dtype), shape,
                     0, 0, 1.0, 1.0, static_cast<int>(process_set), splits);
    req.out_bytes = static_cast<size_t>(std::max(0LL, out_bytes));
    req.received_splits_wanted = splits_given;
    return run_request(std::move(req));
  });
}

// run_reducescatter(name, in_ptr, out_ptr, out_bytes, dtype, shape, op, prescale, postscale,
// process_set): this rank's block goes to out as run_allgather's result does.
PyObject* run_reducescatter(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return with_python_errors([&]() -> PyObject* {
    const char* call = "reducescatter";
    Buffers b;
    long long out_bytes, dtype, op, process_set;
    double prescale, postscale;
    std::vector<int64_t> shape;
    if (!arg_count("run_reducescatter", 10, nargs) || !b.parse(args, "reducescatter: name") ||
        !arg_long(args[3], call, "out_bytes", &out_bytes) || !arg_long(args[4], call, "dtype", &dtype) ||
        !arg_shape(args[5], call, &shape) || !arg_long(args[6], call, "op", &op) ||
        !arg_double(args[7], call, "prescale", &prescale) || !arg_double(args[8], call, "postscale", &postscale) ||
        !arg_long(args[9], call, "process_set", &process_set))
      return nullptr;
    TensorRequest req =
        make_request(static_cast<int>(OpType::kReducescatter), b.name, b.in_ptr, b.out_ptr, static_cast<int>(dtype),
                     shape, 0, static_cast<int>(op), prescale, postscale, static_cast<int>(process_set), kNoSplits);
    req.out_bytes = static_cast<size_t>(std::max(0LL, out_bytes));
    return run_request(std::move(req));
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

// Per-element arguments of a call (args[index[k]]) as fast sequences of one length, released on
// every way out. open() is false with a Python error set: `not_list` when one is not a sequence,
// mismatch(k, its length, the first's length) when lengths differ.
template <int N>
struct EqualLengthLists {
  PyObject* seq[N] = {};
  Py_ssize_t length = -1;
  ~EqualLengthLists() {
    for (PyObject* q : seq) Py_XDECREF(q);
  }
  template <class Mismatch>
  bool open(PyObject* const* args, const int (&index)[N], const char* not_list, Mismatch&& mismatch) {
    for (int k = 0; k < N; ++k) {
      seq[k] = PySequence_Fast(args[index[k]], not_list);
      if (!seq[k]) return false;
      const Py_ssize_t len = PySequence_Fast_GET_SIZE(seq[k]);
      if (length >= 0 && len != length) {
        mismatch(k, len, length);
        return false;
      }
      length = len;
    }
    return true;
  }
};

// enqueue_allreduce_group(name, in_ptrs, out_ptrs, dtype, shapes, op, prescale, postscale,
//                         process_set) -> handle: a grouped allreduce of tensors of one dtype as one
// packed request (see TensorRequest::members). Every member is checked before anything is queued.
PyObject* enqueue_allreduce_group(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_Format(PyExc_TypeError, "enqueue_allreduce_group takes 9 arguments (%zd given)", nargs);
    return nullptr;
  }
  const char* const what[] = {"in_ptrs", "out_ptrs", "shapes"};
  EqualLengthLists<3> lists;
  if (!lists.open(args, {1, 2, 4}, "enqueue_allreduce_group: expected lists", [&](int k, Py_ssize_t len, Py_ssize_t n) {
        PyErr_Format(PyExc_ValueError, "grouped_allreduce: %s has %zd entries, in_ptrs has %zd", what[k], len, n);
      }))
    return nullptr;
  const Py_ssize_t n = lists.length;
  return with_python_errors([&]() -> PyObject* {
    const char* name;
    Py_ssize_t name_len;
    if (!arg_name(args[0], "grouped_allreduce: name", &name, &name_len)) return nullptr;
    if (name_len == 0) throw std::invalid_argument("grouped_allreduce: name must be a non-empty str");
    if (n == 0) throw std::invalid_argument("grouped_allreduce needs at least one tensor");
    long long dtype, op, process_set;
    double prescale, postscale;
    if (!arg_long(args[3], "allreduce", "dtype", &dtype) || !arg_long(args[5], "allreduce", "op", &op) ||
        !arg_double(args[6], "allreduce", "prescale", &prescale) ||
        !arg_double(args[7], "allreduce", "postscale", &postscale) ||
        !arg_long(args[8], "allreduce", "process_set", &process_set))
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
      if (!arg_shape(PySequence_Fast_GET_ITEM(lists.seq[2], i), "allreduce", &shape)) return nullptr;
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
  EqualLengthLists<4> lists;
  if (!lists.open(args, {0, 1, 2, 3}, "enqueue_allreduce_batch: names, ptrs, dtypes and shapes must be lists",
                  [](int, Py_ssize_t, Py_ssize_t) {
                    PyErr_SetString(PyExc_ValueError,
                                    "enqueue_allreduce_batch: names, ptrs, dtypes and shapes differ in length");
                  }))
    return nullptr;
  const Py_ssize_t n = lists.length;
  return with_python_errors([&]() -> PyObject* {
    long long op, process_set;
    double prescale, postscale;
    if (!arg_long(args[4], "allreduce", "op", &op) || !arg_double(args[5], "allreduce", "prescale", &prescale) ||
        !arg_double(args[6], "allreduce", "postscale", &postscale) ||
        !arg_long(args[7], "allreduce", "process_set", &process_set))
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
      if (!arg_long(PySequence_Fast_GET_ITEM(lists.seq[2], i), "allreduce", "dtype", &dtype) ||
          !arg_shape(PySequence_Fast_GET_ITEM(lists.seq[3], i), "allreduce", &shape))
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
PyMethodDef g_run_broadcast_def = fastcall_def<run_broadcast>(
    "run_broadcast",
    "run_broadcast(name, in_ptr, out_ptr, dtype, shape, root, process_set): run_allreduce's counterpart.");
PyMethodDef g_run_allgather_def = fastcall_def<run_allgather>(
    "run_allgather",
    "run_allgather(name, in_ptr, out_ptr, out_bytes, dtype, shape, process_set): the result into out when it "
    "has out_bytes bytes.");
PyMethodDef g_run_alltoall_def = fastcall_def<run_alltoall>(
    "run_alltoall",
    "run_alltoall(name, in_ptr, out_ptr, out_bytes, dtype, shape, splits, process_set): the result into out "
    "when it has out_bytes bytes; received splits only when splits is not None.");
PyMethodDef g_run_reducescatter_def = fastcall_def<run_reducescatter>(
    "run_reducescatter",
    "run_reducescatter(name, in_ptr, out_ptr, out_bytes, dtype, shape, op, prescale, postscale, process_set): "
    "this rank's block into out when it has out_bytes bytes.");
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

void add_fast_calls(py::module_& m) {
  for (PyMethodDef* def :
       {&g_run_allreduce_def, &g_run_broadcast_def, &g_run_allgather_def, &g_run_alltoall_def, &g_run_reducescatter_def,
        &g_enqueue_allreduce_def, &g_enqueue_allreduce_group_def, &g_enqueue_allreduce_batch_def})
    m.add_object(def->ml_name,
                 py::reinterpret_steal<py::object>(PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr())));
}

}  // namespace binding
}  // namespace hs
