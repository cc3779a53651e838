"""Broadcast helpers: model parameters, optimizer state, and arbitrary picklable objects."""
from horovod_spark.common.process_sets import global_process_set
from horovod_spark.torch._data_ops import broadcast_async_
from horovod_spark.torch._handles import synchronize
from horovod_spark.torch._objects import allgather_object, broadcast_object
from horovod_spark.torch.optimizer_state import broadcast_optimizer_state


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrite, in place, every tensor of ``params`` with root's.

    ``params``: a dict such as ``model.state_dict()`` (broadcast in key order), or a list (or any
    iterable) of tensors or ``(name, tensor)`` pairs such as ``model.named_parameters()``.
    """
    if isinstance(params, dict):
        items = sorted(params.items(), key=lambda item: item[0])
    elif hasattr(params, "__iter__") and not isinstance(params, (str, bytes)):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    # All broadcasts are in flight at once; the core fuses small ones.
    handles = [broadcast_async_(p, root_rank, name, process_set=process_set) for name, p in items]
    for handle in handles:
        synchronize(handle)


__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object"]
