"""Collectives on raw CPU buffers: the framework-neutral face of the core.

Every ``*_async`` returns an int handle at once; ``wait(handle)`` returns the result described in
docs/dev/contracts.md. Buffers must stay alive and unchanged until the handle completes: the core
reads and writes them in place, without copies.
"""
import enum
import time
from typing import Optional

from horovod_spark.common import _core
from horovod_spark.exceptions import HorovodCollectiveError, HorovodInternalError, HorovodTimeoutError


class ReduceOp(enum.IntEnum):
    Average = 0
    Sum = 1
    Adasum = 2
    Min = 3
    Max = 4
    Product = 5


Average, Sum, Adasum, Min, Max, Product = (ReduceOp.Average, ReduceOp.Sum, ReduceOp.Adasum,
                                           ReduceOp.Min, ReduceOp.Max, ReduceOp.Product)

DTYPES = {"uint8": 0, "int8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5,
          "float32": 6, "float64": 7, "bool": 8, "int16": 9, "uint16": 10}

# Operation codes shared with native/engine/message.h (OpType).
OP_ALLREDUCE, OP_ALLGATHER, OP_BROADCAST, OP_ALLTOALL, OP_REDUCESCATTER = 0, 1, 2, 3, 4
OP_BARRIER, OP_JOIN, OP_ADD_PROCESS_SET, OP_REMOVE_PROCESS_SET = 5, 6, 7, 8

_ERR_COLLECTIVE, _ERR_INTERNAL = 1, 2


def _dtype_code(dtype: str) -> int:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise TypeError("dtype %r is not supported by horovod_spark collectives; supported: %s"
                        % (dtype, ", ".join(DTYPES))) from None


def _shape(shape) -> list:
    return [int(d) for d in shape]


def _submit(op, name, in_ptr=0, out_ptr=0, dtype="uint8", shape=(), root=0, reduce_op=Sum,
            prescale=1.0, postscale=1.0, process_set_id=0, splits=()):
    if not isinstance(name, str) or not name:
        raise ValueError("collective name must be a non-empty string, got %r" % (name,))
    return _core.enqueue(op, name, int(in_ptr), int(out_ptr), _dtype_code(dtype), _shape(shape),
                         int(root), int(reduce_op), float(prescale), float(postscale),
                         int(process_set_id), [int(s) for s in splits])


_NO_SPLITS = []


def _allreduce_codes(name, dtype, op):
    """(dtype code, op code) of a valid allreduce; the errors name the problem otherwise."""
    code = DTYPES.get(dtype)
    if code is None:
        _dtype_code(dtype)  # raises the TypeError naming the supported dtypes
    if not 0 <= op <= 5:
        raise ValueError("unknown reduction op %r; use Average, Sum, Adasum, Min, Max or Product" % (op,))
    if type(name) is not str or not name:
        raise ValueError("collective name must be a non-empty string, got %r" % (name,))
    return code, int(op)


def allreduce_async(name, in_ptr, out_ptr, dtype, shape, op=Average, prescale=1.0, postscale=1.0,
                    process_set_id=0) -> int:
    # The hot path of DistributedOptimizer (one call per gradient): kept free of generic helpers.
    code, op_code = _allreduce_codes(name, dtype, op)
    return _core.enqueue(OP_ALLREDUCE, name, in_ptr, out_ptr, code, shape, 0, op_code,
                         float(prescale), float(postscale), process_set_id, _NO_SPLITS)


def allreduce(name, in_ptr, out_ptr, dtype, shape, op=Average, prescale=1.0, postscale=1.0,
              process_set_id=0) -> None:
    """``allreduce_async`` + ``wait`` in one call into the core (synchronous collectives): the
    calling thread runs the engine from the start, with no hand-off to the engine thread."""
    code, op_code = _allreduce_codes(name, dtype, op)
    return allreduce_prechecked(name, in_ptr, out_ptr, code, shape, op_code, float(prescale),
                                float(postscale), process_set_id)


# The latency path of synchronous small allreduces, for framework layers that have already validated
# every argument (a str name, a dtype code from DTYPES, an int op, float factors):
# the extension function itself, so that nothing is checked twice and no Python frame is added.
# Returns True on plain success; pass anything else to finish_run().
run_allreduce_prechecked = _core.run_allreduce
# allreduce_async's counterpart (same arguments): returns the handle.
enqueue_allreduce_prechecked = _core.enqueue_allreduce
# (names, ptrs, dtype codes, shapes, op, prescale, postscale, process_set_id) -> handles: in-place
# allreduces of many tensors, prechecked alike, each its own request named as allreduce_async_
# names it, queued together (one lock, one wake-up of the engine).
enqueue_allreduce_batch = _core.enqueue_allreduce_batch


def allreduce_prechecked(name, in_ptr, out_ptr, dtype_code, shape, op, prescale, postscale,
                         process_set_id) -> None:
    """``run_allreduce_prechecked`` with its outcome handled."""
    outcome = _core.run_allreduce(name, in_ptr, out_ptr, dtype_code, shape, op, prescale, postscale,
                                  process_set_id)
    return None if outcome is True else finish_run(outcome)


def finish_run(outcome):
    """The rest of a blocking call after ``run_allreduce_prechecked`` returned ``outcome`` (not True):
    a wait for an op still running after a second, or the error it ended with."""
    if type(outcome) is int:  # still running after a second: wait for it in Ctrl-C-able slices
        return wait(outcome)
    return _result(outcome, False)


# Blocking broadcast, allgather, alltoall and reducescatter for layers that have validated every
# argument, as run_allreduce_prechecked is for allreduce (the calling thread runs the engine from the
# start). Arguments: docs/dev/contracts.md. broadcast's outcome goes to finish_run, the others' to
# finish_run_data.
run_broadcast_prechecked = _core.run_broadcast
run_allgather_prechecked = _core.run_allgather
run_alltoall_prechecked = _core.run_alltoall
run_reducescatter_prechecked = _core.run_reducescatter


def finish_run_data(outcome):
    """The rest of a blocking allgather, alltoall or reducescatter after its ``run_*_prechecked``
    call returned ``outcome``: ``(data, shape, received_splits)``. ``data`` is None when the result
    went into the output buffer the call offered (always so for an outcome of True), else the
    array that owns it, of ``shape``; ``received_splits`` (alltoall) is None unless reported."""
    if outcome is True:
        return None, None, None
    if type(outcome) is int:  # still running after a second
        outcome = _wait_outcome(outcome, None)
    if outcome is True:
        return None, None, None
    kind, message, data, shape, splits, _value = outcome
    _raise_error(kind, message)
    return data, (tuple(shape) if data is not None else None), (list(splits) if splits else None)


def grouped_allreduce_async(name, in_ptrs, out_ptrs, dtype, shapes, op=Average, prescale=1.0,
                            postscale=1.0, process_set_id=0) -> int:
    """One handle for a group of tensors of one dtype, negotiated and reduced as one packed unit:
    one request, one response-cache id, one fused collective. Every member is checked before the
    group is queued, so a bad member leaves nothing half-submitted."""
    if not isinstance(name, str) or not name:
        raise ValueError("collective name must be a non-empty string, got %r" % (name,))
    if not (len(in_ptrs) == len(out_ptrs) == len(shapes)):
        raise ValueError("grouped_allreduce: buffers and shapes must have equal lengths")
    return _core.enqueue_allreduce_group(name, in_ptrs, out_ptrs, _dtype_code(dtype), shapes, int(op), float(prescale),
                                         float(postscale), int(process_set_id))


def grouped_allreduce_by_dtype(name, in_ptrs, out_ptrs, dtypes, shapes, op=Average, prescale=1.0,
                               postscale=1.0, process_set_id=0) -> list:
    """``grouped_allreduce_async`` for a list that may mix dtypes (``dtypes[i]`` names member i's):
    one packed group per dtype, each atomic, named ``name`` when there is one dtype and
    ``name.<dtype>`` otherwise. Returns ``[(member indices, handle)]`` in first-seen dtype order."""
    by_dtype = {}
    for i, dtype in enumerate(dtypes):
        by_dtype.setdefault(dtype, []).append(i)
    names = grouped_allreduce_names(name, dtypes)
    if len(names) > 1:
        check_names_free(names, process_set_id)
    return [(idx, grouped_allreduce_async(group_name, [in_ptrs[i] for i in idx], [out_ptrs[i] for i in idx],
                                          dtype, [shapes[i] for i in idx], op, prescale, postscale,
                                          process_set_id))
            for group_name, (dtype, idx) in zip(names, by_dtype.items())]


def allgather_async(name, in_ptr, dtype, shape, process_set_id=0) -> int:
    return _submit(OP_ALLGATHER, name, in_ptr, 0, dtype, shape, process_set_id=process_set_id)


def broadcast_async(name, in_ptr, out_ptr, dtype, shape, root_rank, process_set_id=0) -> int:
    return _submit(OP_BROADCAST, name, in_ptr, out_ptr, dtype, shape, root=root_rank,
                   process_set_id=process_set_id)


def alltoall_async(name, in_ptr, dtype, shape, splits=None, process_set_id=0) -> int:
    splits = [] if splits is None else [int(s) for s in splits]
    if any(s < 0 for s in splits):
        raise ValueError("alltoall splits must be non-negative, got %r" % (splits,))
    return _submit(OP_ALLTOALL, name, in_ptr, 0, dtype, shape, process_set_id=process_set_id,
                   splits=splits)


def check_reducescatter(shape, op) -> None:
    """The checks Horovod makes when a reducescatter is called: a tensor of at least one dimension
    (ValueError) and an element-wise op (RuntimeError for Adasum, as Horovod's)."""
    if len(shape) == 0:
        raise ValueError("reducescatter does not support scalar inputs: it splits dimension 0 among the "
                         "ranks; give a tensor of at least one dimension (e.g. tensor.reshape(1))")
    check_reducescatter_op(op)


def check_reducescatter_op(op) -> None:
    """``check_reducescatter``'s check of the op alone."""
    try:
        op = ReduceOp(op)
    except ValueError:
        raise ValueError("unknown reduction op %r; use Average, Sum, Min, Max or Product" % (op,)) from None
    if op == ReduceOp.Adasum:
        raise RuntimeError("reducescatter does not support op=Adasum (Adasum combines whole vectors); use "
                           "Average, Sum, Min, Max or Product, or allreduce(op=Adasum)")


def reducescatter_async(name, in_ptr, dtype, shape, op=Average, prescale=1.0, postscale=1.0,
                        process_set_id=0) -> int:
    check_reducescatter(shape, op)
    return _submit(OP_REDUCESCATTER, name, in_ptr, 0, dtype, shape, reduce_op=op,
                   prescale=prescale, postscale=postscale, process_set_id=process_set_id)


def check_names_free(names, process_set_id=0) -> None:
    """ValueError, as Horovod raises for a second request under a name still in flight, when one
    of ``names`` is in flight in the process set or repeats. For callers that submit several
    requests in one call: checked before the first is queued, none is left half-submitted."""
    _core.check_names_free(int(process_set_id), list(names))


def grouped_allreduce_names(name, dtypes) -> list:
    """The core names ``grouped_allreduce_by_dtype`` gives its groups, one per distinct dtype."""
    distinct = list(dict.fromkeys(dtypes))
    return [name] if len(distinct) == 1 else ["%s.%s" % (name, dtype) for dtype in distinct]


def barrier_async(process_set_id=0) -> int:
    return _submit(OP_BARRIER, "__barrier__", process_set_id=process_set_id)


# Handles whose result is the core's integer value (last joined rank, process set id).
_value_handles = set()


def join_async() -> int:
    h = _submit(OP_JOIN, "join")
    _value_handles.add(h)
    return h


def control_async(op, name, root=0, splits=()) -> int:
    """Process-set registration requests (a collective over all ranks)."""
    h = _submit(op, name, root=root, splits=splits)
    _value_handles.add(h)
    return h


def poll(handle: int) -> bool:
    return _core.poll(handle)


def wait_all(handles) -> None:
    """``wait`` for every one of ``handles`` (whose results are not wanted); once all have finished,
    raises the first error among them."""
    done = _core.wait_plain(handles, 1.0)
    error = None
    for h in handles[done:]:
        try:
            wait(h)
        except Exception as exc:  # (raised below, once every handle has finished)
            if error is None:
                error = exc
    if error is not None:
        raise error


def wait(handle: int, timeout: Optional[float] = None):
    """Block until the handle completes and return its result (see module doc). The wait happens
    in short slices so Ctrl-C reaches Python."""
    outcome = _core.wait_take(handle, 1.0 if timeout is None else min(1.0, timeout))
    if outcome is True and handle not in _value_handles:  # the common case, as _result has it
        return None
    if outcome is None:
        outcome = _wait_outcome(handle, timeout, 1.0)
    wants_value = handle in _value_handles
    if wants_value:
        _value_handles.discard(handle)
    return _result(outcome, wants_value)


def _wait_outcome(handle, timeout, waited=0.0):
    """``wait_take``'s outcome of ``handle`` once it completes, waited for in slices of a second
    (so Ctrl-C reaches Python); ``waited``: seconds already spent on it."""
    deadline = None if timeout is None else time.monotonic() + timeout - waited
    outcome = None
    while outcome is None:
        slice_s = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
        outcome = _core.wait_take(handle, slice_s)
        if outcome is None and deadline is not None and time.monotonic() >= deadline:
            raise HorovodTimeoutError("collective did not complete within %.1f s" % timeout)
    return outcome


def _raise_error(kind, message):
    if kind == _ERR_COLLECTIVE:
        raise HorovodCollectiveError(message)
    if kind == _ERR_INTERNAL:
        raise HorovodInternalError(message)


def _result(outcome, wants_value):
    if outcome is True:  # success with no data and a zero value
        return 0 if wants_value else None
    kind, message, data, shape, splits, value = outcome
    _raise_error(kind, message)
    if data is not None:
        return (data, tuple(shape), list(splits)) if splits else (data, tuple(shape))
    return value if wants_value else None
