"""Collectives on CUDA tensors through the NCCL data plane (native/gpu/nccl_plane.h).

``chosen(kind, ...)`` decides per collective whether a CUDA tensor goes to NCCL or to host staging
(``_staging``). ``HOROVOD_GPU_OPERATIONS`` (or the kind's own ``HOROVOD_GPU_ALLREDUCE`` ...) = host
never uses NCCL, nccl always does (or raises the reason it cannot), auto uses it where every rank
of the process set can:
the first auto-mode CUDA collective of a set on each rank runs one small host allgather in which
every rank says whether NCCL loaded and which GPU it uses (host name and device UUID); NCCL is then
used for the set iff it loaded everywhere and no two ranks share a GPU (NCCL refuses that). Ops NCCL
cannot run (Adasum, int16, uint16 and bool reductions, scaled integer reductions) are always staged.

The launchers here submit device pointers with the caller's current CUDA stream: the core orders
NCCL after the work queued there and makes that stream wait for the collective, and the handle
completes once the collective has finished on the GPU. Output tensors are allocated before
submission, so allgather first agrees on every rank's row count and alltoall on the received
splits, each with a small blocking host collective.
"""
import collections
import hashlib
import socket
import threading

import numpy as np
import torch

from horovod_spark.common import basics, config, nccl
from horovod_spark.common import ops as _ops
from horovod_spark.common.process_sets import global_process_set, root_index
from horovod_spark.torch import _buffers, _handles

_REDUCING = ("allreduce", "reducescatter")
_lock = threading.Lock()
_agreed = {}  # process set id -> whether NCCL runs its CUDA collectives (auto mode)
# One lock per set, held through its probe: threads probing different sets in different orders on
# different ranks must not wait for each other.
_set_locks = collections.defaultdict(threading.Lock)


def reset():
    """Forget the per-process-set decisions (init/shutdown: the sets may be new ones)."""
    with _lock:
        _agreed.clear()


def chosen(kind, tensor, process_set, op=_ops.Sum, prescale=1.0, postscale=1.0):
    """True when this CUDA ``tensor``'s ``kind`` collective runs on NCCL (see the module doc)."""
    if not tensor.is_cuda:
        return False
    try:
        op_code = int(op)
    except (TypeError, ValueError):
        return False  # the staged path names the problem
    return decide(kind, _ops.DTYPES[_buffers.check_tensor(tensor)], op_code, prescale, postscale, process_set,
                  lambda: _gpu_identity(tensor.device))


def decide(kind, dtype_code, op_code, prescale, postscale, process_set, identity):
    """``chosen`` for a collective of ``kind`` on a CUDA tensor of ``dtype_code``; ``identity()``
    names this rank's GPU for the auto-mode agreement (called only then)."""
    mode = nccl.mode(kind)
    if mode == "host" or not nccl.supports(dtype_code, op_code, prescale, postscale, kind in _REDUCING):
        return False
    if mode == "nccl":
        reason = nccl.unavailable_reason()
        if reason:
            raise RuntimeError("%s\n(%s or %s asks for NCCL.)" % (reason, config.GPU_OPERATIONS.name,
                                                                  nccl.variable(kind).name))
        return True
    return _agree(process_set, identity)


def _gpu_identity(device):
    """A number naming this rank's GPU across the job: host name and device UUID, hashed."""
    props = torch.cuda.get_device_properties(device)
    text = "%s/%s" % (socket.gethostname(), getattr(props, "uuid", device.index))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "big")


def _host_allgather_int64(name, values, ps_id):
    """Every rank's ``values`` (a list of ints, the same length everywhere), blocking, on the host."""
    mine = np.asarray(values, dtype=np.int64).reshape(1, -1)
    handle = _ops.allgather_async(name, mine.ctypes.data, "int64", mine.shape, ps_id)
    raw, shape = _ops.wait(handle)
    return np.frombuffer(raw, dtype=np.int64).reshape(shape).tolist()


def _agree(process_set, identity):
    ps_id = _handles.process_set_id(process_set)
    with _lock:
        set_lock = _set_locks[ps_id]
    with set_lock:  # (one probe per set, by whichever thread comes first)
        if ps_id not in _agreed:
            usable = nccl.available()
            rows = _host_allgather_int64("nccl.agree.%d" % ps_id, [int(usable), identity() if usable else 0], ps_id)
            ids = [r[1] for r in rows]
            _agreed[ps_id] = all(r[0] for r in rows) and len(set(ids)) == len(ids)
        return _agreed[ps_id]


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


def _enqueue(op_type, name, src, out, shape, ps_id, root=0, op=_ops.Sum, prescale=1.0, postscale=1.0, splits=()):
    dtype_code = _ops.DTYPES[_buffers.check_tensor(src)]
    return nccl.enqueue_device(op_type, name, src.data_ptr(), out.data_ptr(), dtype_code, [int(d) for d in shape],
                               int(root), int(op), float(prescale), float(postscale), ps_id, [int(s) for s in splits],
                               src.device.index, _stream(src.device))


def _contiguous(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _written_back(core_handle, tensor, src):
    """The handle of an in-place op: a contiguous copy's result goes back into ``tensor``."""
    if src is tensor:
        return _handles.register_result(core_handle, tensor, None)

    def finish(_results):
        with torch.no_grad():
            tensor.copy_(src)
        return tensor

    return _handles.register(core_handle, (tensor, src), finish)


def allreduce(tensor, inplace, core_name, op, prescale, postscale, process_set):
    src = _contiguous(tensor)
    out = src if inplace else torch.empty_like(src)
    ps_id = _handles.process_set_id(process_set)
    handle = _enqueue(_ops.OP_ALLREDUCE, core_name, src, out, src.shape, ps_id, op=op, prescale=prescale,
                      postscale=postscale)
    if inplace:
        return _written_back(handle, tensor, src)
    return _handles.register_result(handle, out, src)


def broadcast(tensor, inplace, root_rank, core_name, process_set):
    src = _contiguous(tensor)
    out = src if inplace else torch.empty_like(src)
    handle = _enqueue(_ops.OP_BROADCAST, core_name, src, out, src.shape, _handles.process_set_id(process_set),
                      root=root_index(root_rank, process_set))
    if inplace:
        return _written_back(handle, tensor, src)
    return _handles.register_result(handle, out, src)


def allgather(tensor, core_name, process_set):
    src = _contiguous(tensor)
    ps_id = _handles.process_set_id(process_set)
    rows = [r[0] for r in _host_allgather_int64(core_name + ".rows", [src.shape[0]], ps_id)]
    out = torch.empty((sum(rows),) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
    handle = _enqueue(_ops.OP_ALLGATHER, core_name, src, out, src.shape, ps_id)
    return _handles.register_result(handle, out, src)


def _set_size_and_index(process_set):
    if process_set is global_process_set:
        return basics.size(), basics.rank()
    return process_set.size(), process_set.rank()


def received_splits(core_name, dim0, split_list, process_set):
    """The rows this rank receives from each rank of ``process_set`` in an alltoall where it sends
    ``split_list`` (None: dim 0 split evenly) of its ``dim0`` rows; a blocking host allgather."""
    ps_id = _handles.process_set_id(process_set)
    n, me = _set_size_and_index(process_set)
    if split_list is None:
        split_list = [dim0 // n] * n if dim0 % n == 0 else [-1] * n
    # Every rank checks every rank's (dim 0, splits) alike, so a bad one fails everywhere (splits of
    # different lengths already fail the allgather itself, on every rank).
    table = _host_allgather_int64(core_name + ".splits", [dim0] + list(split_list), ps_id)
    for rank_index, (rows, *sent) in enumerate(table):
        if sent == [-1] * n and rows % n:
            raise ValueError("alltoall of %r: set rank %d's first dimension %d does not divide by %d ranks; pass "
                             "splits" % (core_name, rank_index, rows, n))
        if len(sent) != n or sum(sent) != rows or min(sent) < 0:
            raise ValueError("alltoall of %r: set rank %d gave splits %s; they must have %d non-negative entries "
                             "summing to the first dimension %d" % (core_name, rank_index, sent, n, rows))
    return [row[1 + me] for row in table]


def alltoall(tensor, split_list, splits_dtype, core_name, process_set):
    src = _contiguous(tensor)
    received = received_splits(core_name, src.shape[0], split_list, process_set)
    if split_list is None:
        split_list = [src.shape[0] // len(received)] * len(received)
    out = torch.empty((sum(received),) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
    handle = _enqueue(_ops.OP_ALLTOALL, core_name, src, out, src.shape, _handles.process_set_id(process_set),
                      splits=split_list)
    received_splits_tensor = torch.as_tensor(received, dtype=splits_dtype)
    return _handles.register(handle, (src, out), lambda _results: (out, received_splits_tensor))


def reducescatter(tensor, core_name, op, prescale, postscale, process_set):
    src = _contiguous(tensor)
    ps_id = _handles.process_set_id(process_set)
    n, me = _set_size_and_index(process_set)
    dim0 = src.shape[0]
    rows = dim0 // n + (1 if me < dim0 % n else 0)
    out = torch.empty((rows,) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
    handle = _enqueue(_ops.OP_REDUCESCATTER, core_name, src, out, src.shape, ps_id, op=op, prescale=prescale,
                      postscale=postscale)
    return _handles.register_result(handle, out, src)
