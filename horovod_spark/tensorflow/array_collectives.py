"""Blocking collectives on numpy arrays: the one place this layer talks to the core.

Both execution modes end here: eager ops pass views of tensor memory, ``tf.numpy_function``
passes the arrays TF hands it. Every function submits all of its requests before waiting on any,
so the core can negotiate and fuse them together, and waits for all of them even after one fails,
so no request still reads or writes an array this function is about to drop.
"""
import numpy as np

from horovod_spark.common import ops as _core
from horovod_spark.tensorflow import _buffers


def _core_dtype(array):
    return _buffers.core_dtype(array.dtype)


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


def allreduce(arrays, names, op, prescale=1.0, postscale=1.0, process_set_id=0, groups=()):
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
    _wait_all([h for h in handles if h is not None])
    return outs


def allgather(arrays, names, process_set_id=0):
    """Concatenate every rank's array along dim 0 (which may differ per rank)."""
    _check_names_free(names, process_set_id)
    handles = [_core.allgather_async(n, a.ctypes.data, _core_dtype(a), a.shape, process_set_id)
               for a, n in zip(arrays, names)]
    return [_result_from_core(r, a) for r, a in zip(_wait_all(handles), arrays)]


def broadcast(arrays, names, root_rank, process_set_id=0):
    """Every rank gets root's arrays (``root_rank`` counts within the process set)."""
    _check_names_free(names, process_set_id)
    outs = [_buffers.result_pool.empty(a.shape, a.dtype) for a in arrays]
    handles = [_core.broadcast_async(n, a.ctypes.data, o.ctypes.data, _core_dtype(a), a.shape, root_rank,
                                     process_set_id)
               for a, o, n in zip(arrays, outs, names)]
    _wait_all(handles)
    return outs


def alltoall(array, name, splits=None, process_set_id=0):
    """Send ``splits[r]`` rows to rank r; returns (received rows, received splits as int32)."""
    handle = _core.alltoall_async(name, array.ctypes.data, _core_dtype(array), array.shape,
                                  None if splits is None else [int(s) for s in np.ravel(splits)],
                                  process_set_id)
    result = _wait_all([handle])[0]
    received = result[2] if len(result) > 2 else []
    return _result_from_core(result, array), np.asarray(received, dtype=np.int32).reshape(-1)


def reducescatter(arrays, names, op, prescale=1.0, postscale=1.0, process_set_id=0):
    """Reduce each array and keep this rank's block of dim 0 (earlier ranks get the remainder)."""
    _check_names_free(names, process_set_id)
    handles = [_core.reducescatter_async(n, a.ctypes.data, _core_dtype(a), a.shape, op, prescale, postscale,
                                         process_set_id)
               for a, n in zip(arrays, names)]
    return [_result_from_core(r, a) for r, a in zip(_wait_all(handles), arrays)]


def barrier(process_set_id=0):
    _core.wait(_core.barrier_async(process_set_id))


def join():
    return int(_core.wait(_core.join_async()))
