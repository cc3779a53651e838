"""Job-level operations: init/shutdown (which also reset this layer's handles), join, barrier."""
from horovod_spark.common import basics as _basics
from horovod_spark.common import ops as _core
from horovod_spark.common.process_sets import global_process_set
from horovod_spark.torch import _handles, _nccl


def init(*args, **kwargs):
    """Start the core (``init(comm=None, process_sets=None)``, as ``horovod.torch.init``)."""
    # Handles and unnamed-op counters from an earlier session would not match a fresh core's.
    _handles.reset()
    _nccl.reset()
    return _basics.init(*args, **kwargs)


def shutdown(*args, **kwargs):
    """Stop the core; pending handles are dropped."""
    try:
        return _basics.shutdown(*args, **kwargs)
    finally:
        _handles.reset()
        _nccl.reset()


def join(device=-1):
    """Tell the other ranks this one has no more data; returns the rank that joined last.

    Until every rank joins, the allreduces and reducescatters the others still run proceed with
    this rank contributing zeros; an allgather or a broadcast raises RuntimeError on them, as in
    Horovod. ``device`` is accepted for Horovod compatibility (CPU only here).
    """
    return int(_core.wait(_core.join_async()))


def barrier(process_set=global_process_set):
    """Return once every rank of ``process_set`` has called ``barrier``."""
    _core.wait(_core.barrier_async(_handles.process_set_id(process_set)))
