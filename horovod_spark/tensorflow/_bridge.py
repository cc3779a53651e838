"""Run a collective on tensors: eagerly, inside ``tf.function``, or in a ``tf.compat.v1`` graph.

Eagerly the collective is submitted and waited for directly, on views of the tensors' memory.

In a graph it becomes two ``tf.numpy_function`` ops: a submit op that queues the requests in the
core and returns at once (an int64 key), and a wait op that takes the key and blocks until the
results are there. TensorFlow has no way for a Python op to wait without holding one of the
executor's threads, and its executor picks the order of independent ops differently on each rank,
so a single blocking op per collective can deadlock: each rank's threads all wait in collectives
the other rank has not submitted. Hence the chain: every submit op of a graph has a control
dependency on the submit op created before it in that graph. Creation order is the same on every
rank running the same program, and it is a topological order of the data dependencies, so on every
rank the collectives are submitted in one order, and a thread waits for a collective only once
every collective before it was submitted on its rank. The first collective not yet complete is
then submitted on every rank (nothing before it in any rank's chain is blocked), so it completes:
no deadlock, however many collectives a graph holds and however many threads the executor has,
one included. (``tf.function`` adds its own control dependencies in program order, which agree.)

The price, in a ``tf.compat.v1.Session``: running a collective also runs the submit ops created
before it in the same graph, and what they consume. Results nobody fetched are dropped (see
``_submitted``).

Each op costs a Python call and the GIL per execution (tens of microseconds; measured in
docs/tensorflow_keras.md), which is why callers batch many tensors into one call.

GPU tensors take host staging done by TensorFlow itself: eagerly ``host_view`` copies them to
host memory and the results are copied back to the inputs' GPU; in a graph TF places the
``numpy_function`` ops on the CPU and inserts the copies in and out of them.
"""
import itertools
import weakref

import numpy as np
import tensorflow as tf

from horovod_spark.tensorflow import _buffers, _submitted

# Per graph, per control-flow context: the latest submit op (the next one's control dependency).
_chain_tails = weakref.WeakKeyDictionary()
_op_ids = itertools.count(1)


def _gpu_device(tensors):
    """The device of the first tensor when it is a GPU, else None."""
    device = getattr(tensors[0], "device", "") if tensors else ""
    return device if device and ":GPU:" in device else None


def _run_eagerly(start_fn, tensors, out_dtypes):
    arrays = [_buffers.host_view(t) for t in tensors]
    outs = [_buffers.to_eager(a, d) for a, d in zip(start_fn(*arrays).finish(), out_dtypes)]
    device = _gpu_device(tensors)
    if device is None:
        return outs
    # GPU inputs were copied to host by host_view; results go back to the inputs' device, as
    # Horovod returns them.
    with tf.device(device):
        return [tf.identity(o) for o in outs]


def _control_flow_context(graph):
    # A v1 cond or while loop (tf.compat.v1 with control flow v2 turned off) holds its ops in a
    # context of the graph; a control edge between contexts would make a submit op outside a cond
    # branch that was not taken dead too. Chains therefore stay within one context. (TensorFlow
    # offers no public way to ask; control flow v2 builds branches and bodies as graphs of their
    # own, with no context.)
    get = getattr(graph, "_get_control_flow_context", None)
    return get() if get is not None else None


def _chained_submit(submit, tensors, name):
    graph = tf.compat.v1.get_default_graph()
    tails = _chain_tails.setdefault(graph, {})
    context = _control_flow_context(graph)
    tail = tails.get(id(context))
    with tf.control_dependencies([tail] if tail is not None else []):
        key = tf.numpy_function(submit, tensors, tf.int64, stateful=True, name=name + "Submit")
    tails[id(context)] = key.op
    return key


def run(start_fn, tensors, out_dtypes, out_shapes, name="horovod_spark"):
    """``start_fn(*arrays) -> array_collectives.Pending`` applied to ``tensors``; returns the list of
    tensors its ``finish()`` gives.

    ``out_dtypes``/``out_shapes`` describe the results (shapes may contain None); the pending's
    results must be arrays of exactly those dtypes.
    """
    tensors = list(tensors)
    if tf.executing_eagerly():
        return _run_eagerly(start_fn, tensors, out_dtypes)
    op_id = next(_op_ids)

    def submit(*arrays):
        # numpy_function passes scalar tensors as numpy scalars, which have no buffer address.
        arrays = [np.asarray(a) for a in arrays]
        return np.int64(_submitted.submit(op_id, lambda: start_fn(*arrays)))

    def wait(key):
        outs = _submitted.collect(op_id, int(key))
        return outs if out_dtypes else []

    key = _chained_submit(submit, tensors, name)
    outs = tf.numpy_function(wait, [key], list(out_dtypes), stateful=True, name=name + "Wait")
    if not out_dtypes:
        return []
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return list(outs)


def refuse(message, out_dtypes, out_shapes, name="horovod_spark"):
    """What a collective this rank may not run gives: ``tf.errors.InvalidArgumentError(message)``,
    raised now (eagerly) or when the graph runs the op (as Horovod's kernels fail), so that a graph
    may hold it in a branch that only other ranks take."""
    if tf.executing_eagerly():
        raise tf.errors.InvalidArgumentError(None, None, message)

    def fail():
        # numpy_function turns a ValueError into InvalidArgumentError.
        raise ValueError(message)

    outs = tf.numpy_function(fail, [], list(out_dtypes), stateful=True, name=name + "Refused")
    if not out_dtypes:
        return []
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return list(outs)
