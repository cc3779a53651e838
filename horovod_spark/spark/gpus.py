"""GPU assignment as seen from inside a rank."""
import os
from typing import List

ASSIGNED_GPUS_ENV = "HOROVOD_SPARK_GPUS"


def get_available_devices() -> List[str]:
    """The GPU addresses Spark assigned to this rank's task (TaskContext.resources()['gpu']).

    The runner also exports them as CUDA_VISIBLE_DEVICES, so inside the rank they are renumbered
    cuda:0, cuda:1, ...; without Spark GPU scheduling this is empty and ranks pick a device by
    ``hvd.local_rank()``.
    """
    return [d for d in os.environ.get(ASSIGNED_GPUS_ENV, "").split(",") if d]
