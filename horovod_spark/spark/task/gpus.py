"""GPU assignment as seen from inside a rank: which GPUs Spark gave its task, and which one it uses."""
import sys
from typing import List, Optional, Sequence

from horovod_spark.common import config


def get_available_devices() -> List[str]:
    """The GPU addresses Spark assigned to this rank's task (TaskContext.resources()['gpu']).

    The runner also exports them as CUDA_VISIBLE_DEVICES, so inside the rank they are renumbered
    cuda:0, cuda:1, ...; without Spark GPU scheduling this is empty and ranks pick a device by
    ``hvd.local_rank()``.
    """
    return list(config.SPARK_GPUS.get())


def choose_gpu(task_gpus: Sequence[str], visible: Optional[Sequence[str]], local_rank: int,
               device_count: int) -> Optional[int]:
    """The index, in this process's CUDA numbering, of the GPU a rank uses; None without one.

    - ``task_gpus``: the addresses Spark gave the rank's task (the first one is used);
    - ``visible``: CUDA_VISIBLE_DEVICES as a list, None when it is unset;
    - ``local_rank``: the rank's index on its host; ``device_count``: the devices CUDA shows.

    A Spark address is looked up in ``visible`` (CUDA renumbers the visible devices from 0) or,
    with everything visible, taken as the index itself. Without Spark's assignment, ranks on a
    host take the visible devices round robin by local rank (ranks may share a GPU).
    """
    if device_count <= 0:
        return None
    if task_gpus:
        address = str(task_gpus[0]).strip()
        if visible is not None:
            names = [str(v).strip() for v in visible]
            if address not in names:
                raise ValueError("Spark gave this task GPU %s, but CUDA_VISIBLE_DEVICES=%s hides it; let the task "
                                 "see the GPUs Spark assigns (horovod_spark.run sets CUDA_VISIBLE_DEVICES to them)"
                                 % (address, ",".join(names)))
            index = names.index(address)
        elif address.isdigit():
            index = int(address)
        else:
            raise ValueError("Spark gave this task GPU %r, which is not a device number and CUDA_VISIBLE_DEVICES is "
                             "unset; make the GPU discovery script report device numbers (as nvidia-smi's index)"
                             % address)
        if index >= device_count:
            raise ValueError("Spark gave this task GPU %s (CUDA device %d), but this process sees only %d CUDA "
                             "device(s); check the discovery script against nvidia-smi"
                             % (address, index, device_count))
        return index
    return local_rank % device_count


def _task_context_gpus() -> List[str]:
    """The GPUs of the Spark task this code runs in, when it runs in one (not in a rank process
    that horovod_spark.run started; that one has HOROVOD_SPARK_GPUS)."""
    if "pyspark" not in sys.modules:  # never import Spark just to ask
        return []
    from pyspark import TaskContext
    context = TaskContext.get()
    if context is None:
        return []
    gpu = context.resources().get("gpu")
    return list(gpu.addresses) if gpu is not None else []


def rank_gpu(local_rank: int, device_count: int) -> Optional[int]:
    """``choose_gpu`` with this process's inputs: the Spark task's GPUs (TaskContext, then
    HOROVOD_SPARK_GPUS), CUDA_VISIBLE_DEVICES, ``local_rank`` and ``device_count``."""
    task_gpus = _task_context_gpus() or get_available_devices()
    visible = config.CUDA_VISIBLE_DEVICES.get()
    return choose_gpu(task_gpus, None if visible is None else list(visible), local_rank, device_count)
