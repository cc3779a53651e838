"""``horovod_spark.keras``: the ``horovod.tensorflow.keras`` API for Keras 3 on TensorFlow.

Ported scripts change only their import::

    import horovod_spark.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size())), ...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                hvd.callbacks.MetricAverageCallback()])

See docs/tensorflow_keras.md for what differs from Horovod with Keras 2.
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
from horovod_spark.keras import callbacks, elastic
from horovod_spark.keras.ops import allgather, allreduce, broadcast, broadcast_global_variables, reducescatter
from horovod_spark.keras.saving import load_model
from horovod_spark.tensorflow import (
                                         Adasum,
                                         Average,
                                         Max,
                                         Min,
                                         Product,
                                         Sum,
                                         allgather_object,
                                         barrier,
                                         broadcast_object,
                                         broadcast_variables,
                                         cuda_built,
                                         gpu_available,
                                         init,
                                         join,
                                         nccl_built,
                                         shutdown,
)
from horovod_spark.tensorflow.compression import Compression
from horovod_spark.tensorflow.keras_optimizer import DistributedOptimizer, PartialDistributedOptimizer
from horovod_spark.tensorflow.sync_batch_norm import SyncBatchNormalization

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "is_homogeneous", "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "cuda_built", "gpu_available", "ddl_built", "ccl_built", "rocm_built", "start_timeline",
    "stop_timeline",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set", "HorovodInternalError", "elastic",
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "Compression",
    "DistributedOptimizer", "PartialDistributedOptimizer", "load_model", "callbacks",
    "allreduce", "allgather", "broadcast", "reducescatter", "broadcast_global_variables",
    "broadcast_variables", "broadcast_object", "allgather_object", "join", "barrier", "SyncBatchNormalization",
]
