"""Picklable Python objects through the collectives: broadcast_object and allgather_object."""
import io

import cloudpickle
import numpy as np
import torch

from horovod_spark.common import basics
from horovod_spark.common.process_sets import global_process_set
from horovod_spark.torch import _handles
from horovod_spark.torch._data_ops import allgather_async, broadcast_async_
from horovod_spark.torch._handles import synchronize


def _serialize(obj):
    buf = io.BytesIO()
    cloudpickle.dump(obj, buf)
    return torch.from_numpy(np.frombuffer(buf.getbuffer(), dtype=np.uint8).copy())


def _deserialize(byte_tensor):
    return cloudpickle.loads(byte_tensor.numpy().tobytes())


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Return root's ``obj`` (cloudpickled) on every rank; other ranks' ``obj`` is ignored."""
    # Unlike Horovod (name = type(obj).__name__, which differs when non-root ranks pass None),
    # unnamed calls get counter names that match across ranks.
    base = name if name is not None else _handles.op_name("broadcast_object", None, process_set)
    is_root = basics.rank() == root_rank  # a global rank, as in Horovod
    payload = _serialize(obj) if is_root else None
    size = torch.tensor([payload.numel() if is_root else 0], dtype=torch.int64)
    synchronize(broadcast_async_(size, root_rank, name=base + ".sz", process_set=process_set))
    if not is_root:
        payload = torch.empty(int(size[0]), dtype=torch.uint8)
    synchronize(broadcast_async_(payload, root_rank, name=base + ".t", process_set=process_set))
    return obj if is_root else _deserialize(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Return the list, by rank, of every rank's ``obj`` (cloudpickled)."""
    base = name if name is not None else _handles.op_name("allgather_object", None, process_set)
    payload = _serialize(obj)
    size_handle = allgather_async(torch.tensor([payload.numel()], dtype=torch.int64),
                                  name=base + ".sz", process_set=process_set)
    data_handle = allgather_async(payload, name=base + ".t", process_set=process_set)
    sizes = synchronize(size_handle).tolist()
    data = synchronize(data_handle)
    objects, start = [], 0
    for n in sizes:
        objects.append(_deserialize(data[start:start + n]))
        start += n
    return objects
