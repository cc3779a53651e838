"""Job-level operations: init/shutdown (which also reset generated names), join, barrier, and
Horovod's ``*_op`` topology tensors."""
import tensorflow as tf

from horovod_spark.common import basics as _basics
from horovod_spark.common.process_sets import global_process_set, registered
from horovod_spark.tensorflow import _bridge, _names, _submitted, array_collectives
from horovod_spark.tensorflow._op_args import ps_id


def init(comm=None, process_sets=None):
    """Start the core, as ``horovod.tensorflow.init(comm=None, process_sets=None)``."""
    # Unnamed-op counters from an earlier session would not match a fresh core's on other ranks.
    _names.reset()
    _submitted.reset()
    return _basics.init(comm=comm, process_sets=process_sets)


def shutdown():
    """Stop the core; collectives still in flight fail with HorovodInternalError."""
    try:
        return _basics.shutdown()
    finally:
        _names.reset()
        _submitted.reset()


def join():
    """Tell the other ranks this one has no more data; returns the rank that joined last.

    Until every rank has joined, the allreduces and reducescatters the others still run proceed
    with this rank contributing zeros; an allgather or a broadcast raises RuntimeError on them
    (Horovod's semantics).
    """
    ps_id(global_process_set)
    return _bridge.run(array_collectives.start_join, [], [tf.int32], [[]], name="HorovodJoin")[0]


def barrier(process_set=global_process_set):
    """Return once every rank of ``process_set`` has reached the barrier."""
    psid = ps_id(process_set)
    if not process_set.included():
        _bridge.refuse("barrier: rank %d is not a member of the process set %r" % (_basics.rank(), process_set),
                       [], [], name="HorovodBarrier")
        return
    _bridge.run(lambda: array_collectives.start_barrier(psid), [], [], [], name="HorovodBarrier")


def size_op(process_set_id=0, name=None):
    """The number of ranks (in the process set) as a scalar int32 tensor."""
    return tf.constant(_process_set(process_set_id).size(), dtype=tf.int32, name=name)


def rank_op(name=None):
    return tf.constant(_basics.rank(), dtype=tf.int32, name=name)


def local_size_op(name=None):
    return tf.constant(_basics.local_size(), dtype=tf.int32, name=name)


def local_rank_op(name=None):
    return tf.constant(_basics.local_rank(), dtype=tf.int32, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank belongs to the process set, else 0 (int32 scalar)."""
    return tf.constant(int(_process_set(process_set_id).included()), dtype=tf.int32, name=name)


def _process_set(process_set_id):
    ps = registered(int(process_set_id))
    if ps is None:
        raise ValueError("no registered process set has id %r" % (process_set_id,))
    return ps
