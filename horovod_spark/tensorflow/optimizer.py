"""``horovod.tensorflow.DistributedOptimizer``: for Keras optimizers, the Keras wrapper."""
from horovod_spark.common.process_sets import global_process_set
from horovod_spark.tensorflow._op_args import Average
from horovod_spark.tensorflow.compression import Compression


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Wrap a Keras 3 optimizer so gradients are averaged across ranks before they are applied
    (same as ``horovod_spark.keras.DistributedOptimizer``).

    TF1 ``tf.compat.v1.train.Optimizer`` (graph/session training) is not supported: TF 2 code
    uses Keras optimizers or DistributedGradientTape.
    """
    import keras

    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("horovod_spark.tensorflow.DistributedOptimizer wraps a keras.optimizers.Optimizer; got %s. "
                        "TF1 tf.compat.v1.train optimizers are not supported: use a Keras optimizer, or "
                        "hvd.DistributedGradientTape in a custom training loop." % type(optimizer).__name__)
    from horovod_spark.tensorflow.keras_optimizer import DistributedOptimizer as _keras_distributed_optimizer
    return _keras_distributed_optimizer(optimizer, name=name, compression=compression,
                                        sparse_as_dense=sparse_as_dense,
                                        gradient_predivide_factor=gradient_predivide_factor,
                                        op=op, backward_passes_per_step=backward_passes_per_step,
                                        average_aggregated_gradients=average_aggregated_gradients,
                                        num_groups=num_groups, groups=groups, process_set=process_set,
                                        scale_local_gradients=scale_local_gradients)
