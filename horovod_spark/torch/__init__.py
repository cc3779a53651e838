"""``horovod_spark.torch``: the ``horovod.torch`` API on horovod_spark's core.

Ported scripts change only their import::

    import horovod_spark.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
"""
from horovod_spark.torch import elastic
from horovod_spark.torch import mpi_ops as _mpi_ops
from horovod_spark.torch.functions import (
                                           allgather_object,
                                           broadcast_object,
                                           broadcast_optimizer_state,
                                           broadcast_parameters,
)
from horovod_spark.torch.mpi_ops import *  # noqa: F401,F403 - the op API, listed in mpi_ops.__all__
from horovod_spark.torch.optimizer import DistributedOptimizer
from horovod_spark.torch.sync_batch_norm import SyncBatchNorm

__all__ = list(_mpi_ops.__all__) + [
    "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "allgather_object", "SyncBatchNorm", "elastic",
]
