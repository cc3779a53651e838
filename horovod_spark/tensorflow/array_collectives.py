"""Collectives on numpy arrays: the one place this layer talks to the core.

Both execution modes end here: eager ops pass views of tensor memory, ``tf.numpy_function``
passes the arrays TF hands it. Each ``start_*`` function submits all of its requests and returns
a ``Pending`` at once; ``Pending.finish()`` waits for them and returns the results. The plain
functions do both. A ``Pending`` holds the arrays its requests read and write, so they stay alive
until the core is done with them, and ``finish`` waits for every request even after one fails, so
no request still reads or writes an array that is about to be dropped.
"""
import numpy as np

from horovod_spark.common import ops as _core
from horovod_spark.tensorflow import _buffers


def _core_dtype(array):
    return _buffers.core_dtype(array.dtype)


class Pending:
    """Requests submitted to the core, and how to turn their results into the arrays returned."""

    def __init__(self, handles, finish, keep_alive=()):
        self._handles = handles
        self._finish = finish
        self._keep_alive = keep_alive

    def done(self) -> bool:
        """True once every request has completed (``finish`` then returns without blocking)."""
        return all(_core.poll(h) for h in self._handles)

    def finish(self):
        return self._finish(_wait_all(self._handles))


class Failed(Pending):
    """A submission that raised: ``finish`` raises the same error."""

    def __init__(self, error):
        super().__init__([], None)
        self._error = error

    def finish(self):
        raise self._error


def _wait_all(handles):
    results, error = [], None
    for h in handles:
        try:
            results.append(_core.wait(h))
        except Exception as exc:  # the first error wins; the rest are the same failure seen again
            if error is None:
                error = exc
            results.append(None)
    if error is not None:
        raise error
    return results


def _check_names_free(names, process_set_id):
    # Several requests per call: a name already in flight (Horovod's ValueError) must be found before
    # the first is queued, or those queued would be left reading arrays this function drops.
    if len(names) > 1:
        _core.check_names_free(names, process_set_id)


def _result_from_core(result, like):
    raw, shape = result[0], result[1]
    return _buffers.from_core(raw, shape, like.dtype)


def start_allreduce(arrays, names, op, prescale=1.0, postscale=1.0, process_set_id=0, groups=()):
    """Reduce each array; ``groups`` (lists of indices) are negotiated and fused as units."""
    in_groups = {i for group in groups for i in group}
    core_names = [names[i] for i in range(len(arrays)) if i not in in_groups]
    for group in groups:
        if group:
            core_names += _core.grouped_allreduce_names(names[group[0]] + ".group",
                                                         [_core_dtype(arrays[i]) for i in group])
    _check_names_free(core_names, process_set_id)
    outs = [_buffers.result_pool.empty(a.shape, a.dtype) for a in arrays]
    grouped = set()
    handles = [None] * len(arrays)
    for group in groups:
        idx = list(group)
        if not idx:
            continue
        grouped.update(idx)
        for members, handle in _core.grouped_allreduce_by_dtype(
                names[idx[0]] + ".group", [arrays[i].ctypes.data for i in idx], [outs[i].ctypes.data for i in idx],
                [_core_dtype(arrays[i]) for i in idx], [arrays[i].shape for i in idx], op, prescale, postscale,
                process_set_id):
            handles[idx[members[0]]] = handle  # (a packed group's handle sits at its first member)
    for i, a in enumerate(arrays):
        if i not in grouped:
            handles[i] = _core.allreduce_async(names[i], a.ctypes.data, outs[i].ctypes.data, _core_dtype(a),
                                               a.shape, op, prescale, postscale, process_set_id)
    return Pending([h for h in handles if h is not None], lambda _results: outs, (arrays, outs))


def start_allgather(arrays, names, process_set_id=0):
    """Concatenate every rank's array along dim 0 (which may differ per rank)."""
    _check_names_free(names, process_set_id)
    handles = [_core.allgather_async(n, a.ctypes.data, _core_dtype(a), a.shape, process_set_id)
               for a, n in zip(arrays, names)]
    return Pending(handles, lambda results: [_result_from_core(r, a) for r, a in zip(results, arrays)], arrays)


def start_broadcast(arrays, names, root_rank, process_set_id=0):
    """Every rank gets root's arrays (``root_rank`` counts within the process set)."""
    _check_names_free(names, process_set_id)
    outs = [_buffers.result_pool.empty(a.shape, a.dtype) for a in arrays]
    handles = [_core.broadcast_async(n, a.ctypes.data, o.ctypes.data, _core_dtype(a), a.shape, root_rank,
                                     process_set_id)
               for a, o, n in zip(arrays, outs, names)]
    return Pending(handles, lambda _results: outs, (arrays, outs))


def start_alltoall(array, name, splits=None, process_set_id=0):
    """Send ``splits[r]`` rows to rank r; finishes with [received rows, received splits as int32]."""
    handle = _core.alltoall_async(name, array.ctypes.data, _core_dtype(array), array.shape,
                                  None if splits is None else [int(s) for s in np.ravel(splits)],
                                  process_set_id)

    def finish(results):
        result = results[0]
        received = result[2] if len(result) > 2 else []
        return [_result_from_core(result, array), np.asarray(received, dtype=np.int32).reshape(-1)]

    return Pending([handle], finish, array)


def start_reducescatter(arrays, names, op, prescale=1.0, postscale=1.0, process_set_id=0):
    """Reduce each array and keep this rank's block of dim 0 (earlier ranks get the remainder)."""
    _check_names_free(names, process_set_id)
    handles = [_core.reducescatter_async(n, a.ctypes.data, _core_dtype(a), a.shape, op, prescale, postscale,
                                         process_set_id)
               for a, n in zip(arrays, names)]
    return Pending(handles, lambda results: [_result_from_core(r, a) for r, a in zip(results, arrays)], arrays)


def start_barrier(process_set_id=0):
    """Finishes with [] once every rank of the set has reached the barrier."""
    return Pending([_core.barrier_async(process_set_id)], lambda _results: [])


def start_join():
    """Finishes with [the last rank that joined, as an int32 scalar]."""
    return Pending([_core.join_async()], lambda results: [np.asarray(int(results[0]), dtype=np.int32)])


# The blocking forms: submit, then wait.

def allreduce(arrays, names, op, prescale=1.0, postscale=1.0, process_set_id=0, groups=()):
    return start_allreduce(arrays, names, op, prescale, postscale, process_set_id, groups).finish()


def allgather(arrays, names, process_set_id=0):
    return start_allgather(arrays, names, process_set_id).finish()


def broadcast(arrays, names, root_rank, process_set_id=0):
    return start_broadcast(arrays, names, root_rank, process_set_id).finish()


def alltoall(array, name, splits=None, process_set_id=0):
    """(received rows, received splits as int32)."""
    return tuple(start_alltoall(array, name, splits, process_set_id).finish())


def reducescatter(arrays, names, op, prescale=1.0, postscale=1.0, process_set_id=0):
    return start_reducescatter(arrays, names, op, prescale, postscale, process_set_id).finish()


def barrier(process_set_id=0):
    start_barrier(process_set_id).finish()


def join():
    return int(start_join().finish()[0])
