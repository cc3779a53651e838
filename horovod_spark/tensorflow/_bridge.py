"""Run a numpy-level collective on tensors, eagerly or inside ``tf.function``.

Eagerly the function is called directly on views of the tensors' memory. In a graph it becomes
one ``tf.numpy_function`` op: stateful, so ``tf.function``'s automatic control dependencies run
it in program order (every rank then submits its collectives in the same order), and blocking, so
the collective is complete when the op's outputs are. The op costs a Python call and the GIL per
execution (tens of microseconds; measured in docs/tensorflow_keras.md), which is why callers
batch many tensors into one call.

GPU tensors take host staging done by TensorFlow itself: eagerly ``host_view`` copies them to
host memory and the results are copied back to the inputs' GPU; in a graph TF places the
``numpy_function`` on the CPU and inserts the copies in and out of it.
"""
import numpy as np
import tensorflow as tf

from horovod_spark.tensorflow import _buffers


def _gpu_device(tensors):
    """The device of the first tensor when it is a GPU, else None."""
    device = getattr(tensors[0], "device", "") if tensors else ""
    return device if device and ":GPU:" in device else None


def run(np_fn, tensors, out_dtypes, out_shapes, name="horovod_spark"):
    """``np_fn(*arrays) -> list of arrays`` applied to ``tensors``; returns a list of tensors.

    ``out_dtypes``/``out_shapes`` describe the results (shapes may contain None); ``np_fn`` must
    return arrays of exactly those dtypes.
    """
    tensors = list(tensors)
    if tf.executing_eagerly():
        arrays = [_buffers.host_view(t) for t in tensors]
        outs = [_buffers.to_eager(a, d) for a, d in zip(np_fn(*arrays), out_dtypes)]
        device = _gpu_device(tensors)
        if device is None:
            return outs
        # GPU inputs were copied to host by host_view; results go back to the inputs' device, as
        # Horovod returns them.
        with tf.device(device):
            return [tf.identity(o) for o in outs]
    def call(*arrays):
        # numpy_function passes scalar tensors as numpy scalars, which have no buffer address.
        outs = np_fn(*[np.asarray(a) for a in arrays])
        return outs if out_dtypes else []

    outs = tf.numpy_function(call, tensors, list(out_dtypes), stateful=True, name=name)
    if not out_dtypes:
        return []
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return list(outs)
