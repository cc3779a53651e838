"""Run a numpy-level collective on tensors, eagerly or inside ``tf.function``.

Eagerly the function is called directly on views of the tensors' memory. In a graph it becomes
one ``tf.numpy_function`` op: stateful, so ``tf.function``'s automatic control dependencies run
it in program order (every rank then submits its collectives in the same order), and blocking, so
the collective is complete when the op's outputs are. The op costs a Python call and the GIL per
execution (tens of microseconds; measured in docs/tensorflow_keras.md), which is why callers
batch many tensors into one call.
"""
import numpy as np
import tensorflow as tf

from horovod_spark.tensorflow import _buffers


def run(np_fn, tensors, out_dtypes, out_shapes, name="horovod_spark"):
    """``np_fn(*arrays) -> list of arrays`` applied to ``tensors``; returns a list of tensors.

    ``out_dtypes``/``out_shapes`` describe the results (shapes may contain None); ``np_fn`` must
    return arrays of exactly those dtypes.
    """
    if tf.executing_eagerly():
        arrays = [_buffers.host_view(t) for t in tensors]
        return [_buffers.to_eager(a, d) for a, d in zip(np_fn(*arrays), out_dtypes)]
    def call(*arrays):
        # numpy_function passes scalar tensors as numpy scalars, which have no buffer address.
        outs = np_fn(*[np.asarray(a) for a in arrays])
        return outs if out_dtypes else []

    outs = tf.numpy_function(call, list(tensors), list(out_dtypes), stateful=True, name=name)
    if not out_dtypes:
        return []
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return list(outs)
