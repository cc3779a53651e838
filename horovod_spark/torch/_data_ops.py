"""Asynchronous data movement: allgather (single, grouped), broadcast, alltoall.

Signatures, defaults and return values follow horovod.torch 0.28; every function returns a handle
for ``poll``/``synchronize``.
"""
import torch

from horovod_spark.common import ops as _core
from horovod_spark.common.process_sets import global_process_set, root_index
from horovod_spark.torch import _buffers, _handles, _nccl, _staging
from horovod_spark.torch._handles import synchronize


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


def on_host_now(tensor):
    """Whether a blocking collective on ``tensor`` (already checked) may go straight to the core
    and wait there: a CPU tensor, with CPU collectives not routed through the staging thread. The
    async path's stage, handle and finish callback then have nothing to do, and skipping them
    takes a few microseconds off a small collective."""
    return tensor.is_cpu and not _staging.cpu_on_staging_thread


def allgather_now(tensor, name, process_set):
    """Blocking allgather (``allgather`` when autograd records nothing): the result tensor."""
    dtype = _check_allgather(tensor)
    if not on_host_now(tensor):
        return synchronize(allgather_async(tensor, name, process_set))
    core_name = _handles.op_name("allgather", name, process_set)
    src = _buffers.contiguous(tensor)
    raw, shape = _core.wait(_enqueue_allgather(src, core_name, dtype, _handles.process_set_id(process_set))())
    return _buffers.from_core(raw, shape, tensor.dtype)


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
    if not (isinstance(tensor, torch.Tensor) and on_host_now(tensor)) or tensor.dim() == 0:
        return synchronize(alltoall_async(tensor, splits, name, process_set))
    dtype = _buffers.check_tensor(tensor)
    split_list = _splits_list(splits)
    splits_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    core_name = _handles.op_name("alltoall", name, process_set)
    src = _buffers.contiguous(tensor)
    raw, shape, *rest = _core.wait(_enqueue_alltoall(src, core_name, dtype, split_list,
                                                     _handles.process_set_id(process_set))())
    output = _buffers.from_core(raw, shape, tensor.dtype)
    if splits is None:
        return output, None
    received = rest[0] if rest else []
    return output, torch.as_tensor([int(s) for s in received], dtype=splits_dtype)


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
