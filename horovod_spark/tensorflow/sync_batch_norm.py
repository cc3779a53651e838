"""SyncBatchNormalization: Keras batch normalization whose training statistics span every rank's batch."""
import keras
import tensorflow as tf

from horovod_spark.common import basics as _basics
from horovod_spark.tensorflow import mpi_ops
from horovod_spark.tensorflow._op_args import Sum


@keras.saving.register_keras_serializable(package="horovod_spark")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` over the union of all ranks' batches while training.

    In training mode the mean and variance are those of every rank's rows together, each row
    weighing the same (ranks may have batches of different sizes), so the output, the moving
    statistics (identical on every rank) and the input gradient are those of one process running
    plain ``BatchNormalization`` on the concatenated batch. In inference mode it is plain batch
    normalization with the moving statistics, on each rank alone. Every rank must call the layer
    in training mode the same number of times, as with any collective.

    ``fused`` is Horovod's argument (a Keras 2 option) and must stay False; every other keyword is
    ``BatchNormalization``'s.
    """

    def __init__(self, fused=False, **kwargs):
        if fused is not False:
            raise ValueError("SyncBatchNormalization does not support fused=%r: the fused kernel computes the "
                             "statistics of this rank's batch alone; leave fused out (or pass fused=False)" % fused)
        if kwargs.get("synchronized"):
            raise ValueError("SyncBatchNormalization already synchronizes its statistics over the Horovod ranks; "
                             "synchronized=True is for tf.distribute strategies: leave it out")
        super().__init__(**kwargs)

    def _moments(self, inputs, mask):
        if _basics.size() == 1:
            return super()._moments(inputs, mask)
        # Per channel: row count, sum and sum of squares, summed over the ranks in one allreduce
        # (whose gradient is the allreduce of the upstream gradient, so the input gradient is the
        # global batch's). float64 keeps E[x^2] - E[x]^2 exact enough for float32 activations.
        x = tf.cast(inputs, tf.float64)
        axes = self._reduction_axes
        if mask is None:
            sums = tf.reduce_sum(x, axes)
            squares = tf.reduce_sum(tf.square(x), axes)
            rows = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), tf.float64)
            counts = tf.fill(tf.shape(sums), rows)
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(tf.cast(mask, tf.bool), -1), tf.shape(x)), tf.float64)
            sums = tf.reduce_sum(x * weights, axes)
            squares = tf.reduce_sum(tf.square(x) * weights, axes)
            counts = tf.reduce_sum(weights, axes)
        total = mpi_ops.allreduce(tf.stack([counts, sums, squares]), op=Sum)
        mean = tf.math.divide_no_nan(total[1], total[0])
        variance = tf.maximum(tf.math.divide_no_nan(total[2], total[0]) - tf.square(mean), 0.0)
        return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)
