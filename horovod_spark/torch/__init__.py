"""``horovod_spark.torch``: the ``horovod.torch`` API on horovod_spark's core.

Ported scripts change only their import::

    import horovod_spark.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
"""
from horovod_spark.torch.compression import Compression
from horovod_spark.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                           broadcast_parameters)
from horovod_spark.torch.mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min, Product,
                                         ProcessSet, Sum, add_process_set, allgather, allgather_async,
                                         allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
                                         alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                                         broadcast_async_, ccl_built, cross_rank, cross_size, cuda_built,
                                         ddl_built, global_process_set, gloo_built, gloo_enabled,
                                         grouped_allgather, grouped_allgather_async, grouped_allreduce,
                                         grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
                                         grouped_reducescatter, grouped_reducescatter_async, init,
                                         is_initialized, join, local_rank, local_size, mpi_built, mpi_enabled,
                                         mpi_threads_supported, nccl_built, poll, rank, reducescatter,
                                         reducescatter_async, remove_process_set, rocm_built, shutdown, size,
                                         sparse_allreduce_async, start_timeline, stop_timeline, synchronize)
from horovod_spark.torch.optimizer import DistributedOptimizer
from horovod_spark.torch.sync_batch_norm import SyncBatchNorm

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
    "cross_rank", "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "cuda_built", "ddl_built", "ccl_built", "rocm_built", "start_timeline", "stop_timeline",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "Compression", "HorovodInternalError",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "barrier", "join", "poll", "synchronize",
    "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "allgather_object", "SyncBatchNorm",
]
