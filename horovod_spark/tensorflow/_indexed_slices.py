"""allreduce of ``tf.IndexedSlices`` (sparse gradients, embedding lookups): shared by
``mpi_ops.allreduce`` and the gradient averaging of DistributedGradientTape and the Keras
DistributedOptimizer."""
import tensorflow as tf

from horovod_spark.tensorflow import _primitives
from horovod_spark.tensorflow._buffers import as_tensor
from horovod_spark.tensorflow._op_args import Average, Sum


def allreduce_slices(slices, core_name, op, prescale_factor, postscale_factor, process_set):
    """Reduce tf.IndexedSlices by gathering every rank's values and indices, as Horovod does:
    the result lists duplicate indices once per rank, which sparse updates add up."""
    if op not in (Average, Sum):
        raise NotImplementedError("allreduce of tf.IndexedSlices supports op=Average and op=Sum only, not %s; "
                                  "densify with tf.convert_to_tensor (or sparse_as_dense=True)" % op.name)
    values = as_tensor(slices.values, "allreduce(IndexedSlices.values)")
    indices = as_tensor(slices.indices, "allreduce(IndexedSlices.indices)")
    values, indices = _primitives.allgather([values, indices], [core_name + ".values", core_name + ".indices"],
                                            process_set)
    scale = prescale_factor * postscale_factor
    if op == Average:
        scale /= process_set.size()
    if scale != 1:
        if values.dtype.is_floating:
            values = values * tf.cast(scale, values.dtype)
        else:
            values = tf.cast(tf.cast(values, tf.float64) * scale, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)
