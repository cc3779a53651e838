"""The collective operations of ``horovod_spark.torch``, named and shaped as ``horovod.torch.mpi_ops``.

Synchronous functions live here; the ``*_async`` ones, which return handles for ``poll`` and
``synchronize``, live in ``_reduce_ops`` / ``_data_ops``. Functions without a trailing underscore
leave their input unchanged and are differentiable; those with one work in place.
"""
from horovod_spark.common import basics as _basics
from horovod_spark.common import gpu_support as _gpu_support
from horovod_spark.common.basics import (
    cross_rank,
    cross_size,
    gloo_built,
    gloo_enabled,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    rank,
    size,
    start_timeline,
    stop_timeline,
)
from horovod_spark.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from horovod_spark.exceptions import HorovodInternalError
from horovod_spark.torch import _reduce_ops
from horovod_spark.torch._autograd import (
    HorovodAllgather,
    HorovodAllreduce,
    HorovodAlltoall,
    HorovodBroadcast,
    HorovodGroupedAllgather,
    HorovodGroupedAllreduce,
    HorovodGroupedReducescatter,
    HorovodReducescatter,
    needs_autograd,
)
from horovod_spark.torch._control_ops import barrier, init, join, shutdown
from horovod_spark.torch._data_ops import (
    allgather_async,
    allgather_now,
    alltoall_async,
    alltoall_now,
    broadcast_async,
    broadcast_async_,
    broadcast_now,
    grouped_allgather_async,
)
from horovod_spark.torch._handles import poll, synchronize
from horovod_spark.torch._reduce_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allreduce_async,
    allreduce_async_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter_async,
    handle_average_backwards_compatibility,
    reducescatter_async,
    reducescatter_now,
    sparse_allreduce_async,
)
from horovod_spark.torch.compression import Compression


def _not_built():
    return False


def cuda_built():
    """True when torch was built with CUDA: collectives then take CUDA tensors (host staging)."""
    return _gpu_support.cuda_built("torch")


def nccl_built():
    """False: CUDA tensors take host staging, there is no NCCL data plane (common/gpu_support.py)."""
    return _gpu_support.nccl_built("torch")


def gpu_available():
    """True when torch was built with CUDA and this process sees a CUDA device."""
    return _gpu_support.gpu_available("torch")


# Horovod exposes these build queries too; this core has none of those backends.
ddl_built = getattr(_basics, "ddl_built", _not_built)
ccl_built = getattr(_basics, "ccl_built", _not_built)
rocm_built = getattr(_basics, "rocm_built", _not_built)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduce ``tensor`` over the process set (op=None: Average); returns a new tensor."""
    if op is None or average is not None:  # (an explicit op alone needs no resolving)
        op = handle_average_backwards_compatibility(op, average)
    plain = compression is Compression.none  # (its compress and decompress return their input)
    compressed, ctx = (tensor, None) if plain else compression.compress(tensor)
    if needs_autograd((compressed,)):
        reduced = HorovodAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    else:
        reduced = _reduce_ops.allreduce_now(compressed, False, name, op, prescale_factor, postscale_factor,
                                            process_set)
    return reduced if plain else compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduce ``tensor`` in place; returns ``tensor``."""
    if op is None or average is not None:  # (an explicit op alone needs no resolving)
        op = handle_average_backwards_compatibility(op, average)
    return _reduce_ops.allreduce_now(tensor, True, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduce a list of tensors as one fused unit; returns a list of new tensors."""
    op = handle_average_backwards_compatibility(op, average)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    if compressed and not needs_autograd(compressed):
        reduced = synchronize(_reduce_ops.grouped_allreduce_async(list(compressed), None, name, op, prescale_factor,
                                                                  postscale_factor, process_set))
    else:
        reduced = HorovodGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                                *compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduce a list of tensors in place; returns the list."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenate every rank's ``tensor`` along dim 0 (sizes may differ per rank)."""
    if needs_autograd((tensor,)):
        return HorovodAllgather.apply(tensor, name, process_set)
    return allgather_now(tensor, name, process_set)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """``allgather`` of each tensor of a list; returns a list."""
    tensors = list(tensors)
    if tensors and not needs_autograd(tensors):
        return synchronize(grouped_allgather_async(tensors, name, process_set))
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Root's ``tensor`` on every rank, as a new tensor."""
    if needs_autograd((tensor,)):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return broadcast_now(tensor, False, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrite ``tensor`` with root's on every rank; returns ``tensor``."""
    return broadcast_now(tensor, True, root_rank, name, process_set)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatter rows of ``tensor`` to the ranks and gather what they send.

    Returns the gathered tensor, and, when ``splits`` was given, also the received splits
    (``(output, received_splits)``), as Horovod does.
    """
    if needs_autograd((tensor,)):
        output, received_splits = HorovodAlltoall.apply(tensor, splits, name, process_set)
    else:
        output, received_splits = alltoall_now(tensor, splits, name, process_set)
    return output if splits is None else (output, received_splits)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce ``tensor`` over the ranks and return this rank's block of dim 0."""
    compressed, ctx = compression.compress(tensor)
    if needs_autograd((compressed,)):
        reduced = HorovodReducescatter.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    else:
        reduced = reducescatter_now(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """``reducescatter`` of each tensor of a list; returns a list."""
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    if compressed and not needs_autograd(compressed):
        reduced = synchronize(grouped_reducescatter_async(list(compressed), name, op, process_set, prescale_factor,
                                                          postscale_factor))
    else:
        reduced = HorovodGroupedReducescatter.apply(name, op, prescale_factor, postscale_factor, process_set,
                                                    *compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]


__all__ = [
    "init", "shutdown", "is_initialized", "is_homogeneous", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
    "gloo_built", "nccl_built", "cuda_built", "gpu_available", "ddl_built", "ccl_built", "rocm_built", "start_timeline",
    "stop_timeline", "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "Compression", "HorovodInternalError",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async", "broadcast",
    "broadcast_", "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async", "barrier", "join",
    "poll", "synchronize", "handle_average_backwards_compatibility",
]
