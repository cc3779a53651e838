"""Asynchronous data movement: allgather (single, grouped), broadcast, alltoall.

Signatures, defaults and return values follow horovod.torch 0.28; every function returns a handle
for ``poll``/``synchronize``.
"""
import torch

from horovod_spark.common import basics as _basics
from horovod_spark.common import ops as _core
from horovod_spark.common.process_sets import global_process_set, root_index
from horovod_spark.torch import _buffers, _handles, _nccl, _staging
from horovod_spark.torch._handles import synchronize

_CPU_DTYPE_CODES = _buffers.CORE_DTYPE_CODES
# Bound once for the hot paths: torch's module __getattr__ keeps CPython from caching ``torch.X``.
_Tensor = torch.Tensor
_empty_like = torch.empty_like
# Blocking calls offer the core an output tensor for results smaller than this; larger ones come
# from the core's recycled blocks (native/engine/result_buffer.h), whose pages are already mapped.
OWN_OUTPUT_BELOW = 1 << 20


def _check_allgather(tensor):
    dtype = _buffers.check_tensor(tensor)
    if tensor.dim() == 0:
        raise ValueError("allgather concatenates along dimension 0, so it needs a tensor of at least "
                         "one dimension; got a scalar (use tensor.reshape(1))")
    return dtype


def _enqueue_allgather(src, core_name, dtype, ps_id):
    return lambda: _core.allgather_async(core_name, src.data_ptr(), dtype, tuple(src.shape), ps_id)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Start concatenating every rank's ``tensor`` along dim 0 (which may differ per rank)."""
    dtype = _check_allgather(tensor)
    core_name = _handles.op_name("allgather", name, process_set)
    if tensor.is_cuda and _nccl.chosen("allgather", tensor, process_set):
        return _nccl.allgather(tensor, core_name, process_set)
    stage = _staging.begin(tensor.device)
    src = stage.host(tensor)
    core_handle = stage.submit(_enqueue_allgather(src, core_name, dtype, _handles.process_set_id(process_set)))
    out_dtype = tensor.dtype

    def finish(results):
        raw, shape = results[0]
        return stage.to_device(_buffers.from_core(raw, shape, out_dtype))

    return _handles.register(core_handle, (tensor, src), finish)


def direct_dtype_code(tensor):
    """The core's dtype code when a blocking collective on ``tensor`` may go straight to the core's
    ``run_*_prechecked`` call: a contiguous CPU tensor of a supported dtype, with CPU collectives
    not routed through the staging thread. The async path's stage, handle and finish callback then
    have nothing to do, and skipping them takes microseconds off a small collective. None
    otherwise: the checked path then names any problem."""
    if not (isinstance(tensor, _Tensor) and tensor.is_cpu) or _staging.cpu_on_staging_thread:
        return None
    code = _CPU_DTYPE_CODES.get(tensor.dtype)
    if code is None or not tensor.is_contiguous():  # (sparse: not contiguous)
        return None
    return code


def core_name(op_type, name, process_set):
    """``_handles.op_name``, with a str name joined without a format (on the latency path)."""
    if type(name) is str:
        return op_type + "." + name
    return _handles.op_name(op_type, name, process_set)


def set_id_and_size(process_set):
    """(core id, number of ranks) of ``process_set`` for a collective this rank submits on it."""
    if process_set is global_process_set:
        return 0, _basics.size()
    ps_id = _handles.process_set_id(process_set)
    return ps_id, (process_set or global_process_set).size()


def rank_in_set(process_set):
    """This rank's index in ``process_set`` (a member's, as ``set_id_and_size`` checked)."""
    return _basics.rank() if process_set is global_process_set else (process_set or global_process_set).rank()


def output_for(tensor, rows):
    """An uninitialised tensor like ``tensor`` with ``rows`` rows, for a blocking call to offer the
    core (None when the result is too large to take that way, or empty)."""
    shape = tensor.shape
    if rows == 0 or (tensor.nbytes // shape[0] if shape[0] else 0) * rows >= OWN_OUTPUT_BELOW:
        return None
    return tensor.new_empty(rows) if len(shape) == 1 else tensor.new_empty((rows,) + shape[1:])


def output_of(out, outcome, dtype):
    """The result tensor of a blocking allgather or reducescatter: ``out`` (the tensor offered, or
    None) when the core filled it, else a tensor over the memory the core returned."""
    if outcome is True:
        return out
    raw, shape, _ = _core.finish_run_data(outcome)
    return out if raw is None else _buffers.from_core(raw, shape, dtype)


def allgather_now(tensor, name, process_set):
    """Blocking allgather (``allgather`` when autograd records nothing): the result tensor."""
    code = direct_dtype_code(tensor)
    if code is None or tensor.dim() == 0:
        return synchronize(allgather_async(tensor, name, process_set))
    ps_id, n = set_id_and_size(process_set)
    name = core_name("allgather", name, process_set)
    # Offered for the usual case, every rank's first dimension the same: the result then has
    # exactly its size.
    out = output_for(tensor, tensor.shape[0] * n)
    outcome = _core.run_allgather_prechecked(name, tensor.data_ptr(), 0 if out is None else out.data_ptr(),
                                             0 if out is None else out.nbytes, code, tensor.shape, ps_id)
    return output_of(out, outcome, tensor.dtype)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """``allgather_async`` over a list; ``synchronize`` returns a list."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped allgather needs at least one tensor")
    dtypes = [_check_allgather(t) for t in tensors]  # every member before any is queued
    stage = _staging.begin(_buffers.check_same_device(tensors))
    base = _handles.op_name("grouped_allgather", name, process_set)
    names = ["%s.%dof%d" % (base, i, len(tensors)) for i in range(len(tensors))]
    ps_id = _handles.process_set_id(process_set)
    _core.check_names_free(names, ps_id)
    srcs = [stage.host(t) for t in tensors]
    enqueues = [_enqueue_allgather(s, n, d, ps_id) for s, n, d in zip(srcs, names, dtypes)]
    core_handle = stage.submit(lambda: [enqueue() for enqueue in enqueues])
    out_dtypes = [t.dtype for t in tensors]

    def finish(results):
        return [stage.to_device(_buffers.from_core(raw, shape, dtype))
                for (raw, shape), dtype in zip(results, out_dtypes)]

    return _handles.register(core_handle, (tensors, srcs), finish)


def _launch_broadcast(tensor, inplace, root_rank, name, process_set):
    dtype = _buffers.check_tensor(tensor)
    ps_id = _handles.process_set_id(process_set)
    root = root_index(root_rank, process_set)  # the core counts the root within the set
    core_name = _handles.op_name("broadcast", name, process_set)
    if tensor.is_cuda and _nccl.chosen("broadcast", tensor, process_set):
        return _nccl.broadcast(tensor, inplace, root_rank, core_name, process_set)
    stage = _staging.begin(tensor.device)
    src = stage.host(tensor)
    out = src if inplace else stage.host_empty(src)
    core_handle = stage.submit(lambda: _core.broadcast_async(core_name, src.data_ptr(), out.data_ptr(), dtype,
                                                             tuple(out.shape), root, ps_id))

    def finish(_results):
        if inplace:
            stage.copy_into(tensor, out)
            return tensor
        return stage.to_device(out)

    return _handles.register(core_handle, (tensor, src, out), finish)


def broadcast_now(tensor, inplace, root_rank, name, process_set):
    """Blocking broadcast (``broadcast_``, and ``broadcast`` when autograd records nothing): the
    result tensor, ``tensor`` itself when ``inplace``."""
    code = direct_dtype_code(tensor)
    if code is None:
        return synchronize(_launch_broadcast(tensor, inplace, root_rank, name, process_set))
    if process_set is global_process_set and type(root_rank) is int and 0 <= root_rank < _basics.size():
        ps_id, root = 0, root_rank
    else:  # (the checks, in _launch_broadcast's order)
        ps_id = _handles.process_set_id(process_set)
        root = root_index(root_rank, process_set)
    name = core_name("broadcast", name, process_set)
    out = tensor if inplace else _empty_like(tensor)  # (contiguous, as tensor is)
    outcome = _core.run_broadcast_prechecked(name, tensor.data_ptr(), out.data_ptr(), code, tensor.shape, root, ps_id)
    if outcome is not True:
        _core.finish_run(outcome)
    return out


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Start broadcasting root's ``tensor`` into a new tensor on every rank; ``tensor`` is unchanged."""
    return _launch_broadcast(tensor, False, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Start broadcasting root's ``tensor`` into ``tensor`` itself on every rank."""
    return _launch_broadcast(tensor, True, root_rank, name, process_set)


def _splits_list(splits):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        # Refused by dtype, whatever the values, as Horovod does (it takes int32 only; any integer
        # dtype is accepted here). A list goes through int(), as Horovod's int32 conversion of it.
        if splits.dtype.is_floating_point or splits.dtype.is_complex or splits.dtype == torch.bool:
            raise ValueError("alltoall splits must be a tensor of integers (such as torch.int32), got %s"
                             % splits.dtype)
        if splits.dim() > 1:
            raise ValueError("alltoall splits must be a 1-D tensor, got shape %s" % (tuple(splits.shape),))
        return [int(s) for s in splits.reshape(-1).tolist()]
    return [int(s) for s in splits]


def _enqueue_alltoall(src, core_name, dtype, split_list, ps_id):
    return lambda: _core.alltoall_async(core_name, src.data_ptr(), dtype, tuple(src.shape), split_list, ps_id)


def alltoall_now(tensor, splits, name, process_set):
    """Blocking alltoall (``alltoall`` when autograd records nothing): (output, received splits),
    the received splits None when ``splits`` is (``alltoall`` then returns the output alone, and
    building their tensor would cost as much as the rest of the call)."""
    code = direct_dtype_code(tensor)
    if code is None or tensor.dim() == 0:
        return synchronize(alltoall_async(tensor, splits, name, process_set))
    split_list = _splits_list(splits)
    ps_id = 0 if process_set is global_process_set else _handles.process_set_id(process_set)
    name = core_name("alltoall", name, process_set)
    # Offered for the usual case, each rank receiving as many rows as it sends.
    out = output_for(tensor, tensor.shape[0])
    outcome = _core.run_alltoall_prechecked(name, tensor.data_ptr(), 0 if out is None else out.data_ptr(),
                                            0 if out is None else out.nbytes, code, tensor.shape, split_list,
                                            ps_id)
    if outcome is True:
        return out, None  # (the core reports received splits whenever splits were given)
    raw, shape, received = _core.finish_run_data(outcome)
    output = out if raw is None else _buffers.from_core(raw, shape, tensor.dtype)
    if splits is None:
        return output, None
    splits_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    return output, torch.as_tensor([int(s) for s in received or []], dtype=splits_dtype)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Start sending ``splits[r]`` rows of ``tensor`` (dim 0, in rank order) to each rank r.

    ``synchronize`` returns ``(output, received_splits)``; ``splits=None`` splits dim 0 evenly.
    """
    dtype = _buffers.check_tensor(tensor)
    if tensor.dim() == 0:
        raise ValueError("alltoall splits along dimension 0, so it needs a tensor of at least one "
                         "dimension")
    split_list = _splits_list(splits)
    core_name = _handles.op_name("alltoall", name, process_set)
    # As in Horovod: received splits take the dtype of the splits tensor given, else int32, and
    # stay on the CPU.
    splits_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    if tensor.is_cuda and _nccl.chosen("alltoall", tensor, process_set):
        return _nccl.alltoall(tensor, split_list, splits_dtype, core_name, process_set)
    ps_id = _handles.process_set_id(process_set)
    stage = _staging.begin(tensor.device)
    src = stage.host(tensor)
    core_handle = stage.submit(_enqueue_alltoall(src, core_name, dtype, split_list, ps_id))
    out_dtype = tensor.dtype

    def finish(results):
        raw, shape, *rest = results[0]
        received = rest[0] if rest else []
        output = stage.to_device(_buffers.from_core(raw, shape, out_dtype))
        return output, torch.as_tensor([int(s) for s in received], dtype=splits_dtype)

    return _handles.register(core_handle, (tensor, src), finish)
