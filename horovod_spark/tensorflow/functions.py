"""Variables and Python objects through the collectives: broadcast_variables, broadcast_object,
allgather_object (as in ``horovod.tensorflow.functions``)."""
import cloudpickle
import numpy as np
import tensorflow as tf

from horovod_spark.common.process_sets import global_process_set
from horovod_spark.tensorflow import _names, _primitives, array_collectives
from horovod_spark.tensorflow._buffers import as_tensor
from horovod_spark.tensorflow._op_args import check_root, ps_id, ps_rank


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assign the root's values to ``variables`` on every rank (tf.Variable or keras.Variable).

    All variables travel in one collective call. ``inplace`` is accepted for Horovod
    compatibility: assignment is always how the new values land here.
    """
    variables = list(variables)
    if not variables:
        return tf.group()
    base = _names.op_name("broadcast_variables")
    names = ["%s.%d" % (base, i) for i in range(len(variables))]
    values = [as_tensor(v, "broadcast_variables") for v in variables]
    received = _primitives.broadcast(values, names, root_rank, process_set)
    return tf.group(*[v.assign(r) for v, r in zip(variables, received)])


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's in-place broadcast of variables: assign the root's values to ``variables`` and
    return those values (a list of tensors, in order)."""
    variables = list(variables)
    if not variables:
        return []
    base = _names.op_name("broadcast_", name)
    names = ["%s.%d" % (base, i) for i in range(len(variables))]
    values = [as_tensor(v, "broadcast_") for v in variables]
    received = _primitives.broadcast(values, names, root_rank, process_set)
    with tf.control_dependencies([v.assign(r) for v, r in zip(variables, received)]):
        return [tf.identity(r) for r in received]


def broadcast_global_variables(root_rank):
    """Broadcast every TF1 global variable (graph mode only, as in Horovod)."""
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution. Use "
                           "hvd.broadcast_variables(model.variables + optimizer.variables, root_rank) instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def _object_names(kind, name):
    # Unlike Horovod (type(obj).__name__, which differs when non-root ranks pass None), unnamed
    # calls get counter names, equal on every rank that calls in the same order.
    base = "%s.%s" % (kind, name) if name is not None else _names.op_name(kind)
    return base + ".size", base + ".data"


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Return the root's ``obj`` (cloudpickled) on every rank; other ranks' ``obj`` is ignored."""
    psid = ps_id(process_set)
    root_rank = check_root(root_rank, process_set)
    size_name, data_name = _object_names("broadcast_object", name)
    is_root = ps_rank(process_set) == root_rank
    payload = np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8) if is_root else None
    size = np.array([payload.size if is_root else 0], dtype=np.int64)
    size = array_collectives.broadcast([size], [size_name], root_rank, psid)[0]
    data = payload if is_root else np.zeros(int(size[0]), dtype=np.uint8)
    data = array_collectives.broadcast([data], [data_name], root_rank, psid)[0]
    return obj if is_root else cloudpickle.loads(data.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function ``fn(obj)`` that broadcasts ``obj`` from the root each time it is called."""
    def _broadcast(obj):
        return broadcast_object(obj, root_rank, session, name, process_set)
    return _broadcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Return the list, by rank in the process set, of every rank's ``obj`` (cloudpickled)."""
    psid = ps_id(process_set)
    size_name, data_name = _object_names("allgather_object", name)
    payload = np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8)
    sizes, data = array_collectives.allgather([np.array([payload.size], dtype=np.int64), payload],
                                    [size_name, data_name], psid)
    objects, start = [], 0
    for n in sizes.tolist():
        objects.append(cloudpickle.loads(data[start:start + n].tobytes()))
        start += n
    return objects
