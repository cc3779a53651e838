"""``horovod_spark.tensorflow``: the ``horovod.tensorflow`` API on horovod_spark's core.

Ported scripts change only their import::

    import horovod_spark.tensorflow as hvd
    hvd.init()
    tape = hvd.DistributedGradientTape(tape)
    hvd.broadcast_variables(model.variables, root_rank=0)

Every op works eagerly and inside ``tf.function`` (where it runs as a ``tf.numpy_function``; see
docs/tensorflow_keras.md for what that costs). This package imports neither pyspark nor torch.
"""
from horovod_spark.common.basics import (
                                         ccl_built,
                                         cross_rank,
                                         cross_size,
                                         ddl_built,
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
                                         rocm_built,
                                         size,
                                         start_timeline,
                                         stop_timeline,
)
from horovod_spark.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from horovod_spark.exceptions import HorovodInternalError
from horovod_spark.tensorflow import elastic
from horovod_spark.tensorflow._build import cuda_built, gpu_available, nccl_built
from horovod_spark.tensorflow._control import (
                                         barrier,
                                         init,
                                         join,
                                         local_rank_op,
                                         local_size_op,
                                         process_set_included_op,
                                         rank_op,
                                         shutdown,
                                         size_op,
)
from horovod_spark.tensorflow._op_args import Adasum, Average, Max, Min, Product, Sum
from horovod_spark.tensorflow.compression import Compression
from horovod_spark.tensorflow.functions import (
                                         allgather_object,
                                         broadcast_,
                                         broadcast_global_variables,
                                         broadcast_object,
                                         broadcast_object_fn,
                                         broadcast_variables,
)
from horovod_spark.tensorflow.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from horovod_spark.tensorflow.mpi_ops import (
                                         allgather,
                                         allreduce,
                                         alltoall,
                                         broadcast,
                                         grouped_allgather,
                                         grouped_allreduce,
                                         grouped_reducescatter,
                                         reducescatter,
)
from horovod_spark.tensorflow.optimizer import DistributedOptimizer
from horovod_spark.tensorflow.util import (
                                         check_num_rank_power_of_2,
                                         handle_average_backwards_compatibility,
                                         refs_to_vars,
                                         vars_to_refs,
)

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "is_homogeneous", "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "cuda_built", "gpu_available", "ddl_built", "ccl_built", "rocm_built", "start_timeline",
    "stop_timeline",
    "size_op", "rank_op", "local_size_op", "local_rank_op", "process_set_included_op",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set", "HorovodInternalError", "elastic",
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "Compression",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "broadcast_", "alltoall",
    "reducescatter", "grouped_reducescatter", "join", "barrier",
    "broadcast_variables", "broadcast_global_variables", "broadcast_object", "broadcast_object_fn",
    "allgather_object", "DistributedGradientTape", "PartialDistributedGradientTape", "DistributedOptimizer",
    "handle_average_backwards_compatibility", "check_num_rank_power_of_2", "vars_to_refs", "refs_to_vars",
    "SyncBatchNormalization",
]


def __getattr__(name):
    # A Keras layer: importing Keras waits until a script asks for it.
    if name == "SyncBatchNormalization":
        from horovod_spark.tensorflow.sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
