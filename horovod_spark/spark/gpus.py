"""GPU assignment as seen from inside a rank."""
from typing import List

from horovod_spark.common import config


def get_available_devices() -> List[str]:
    """The GPU addresses Spark assigned to this rank's task (TaskContext.resources()['gpu']).

    The runner also exports them as CUDA_VISIBLE_DEVICES, so inside the rank they are renumbered
    cuda:0, cuda:1, ...; without Spark GPU scheduling this is empty and ranks pick a device by
    ``hvd.local_rank()``.
    """
    return list(config.SPARK_GPUS.get())
