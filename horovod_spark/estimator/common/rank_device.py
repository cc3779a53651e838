"""The device a training rank uses, and the one line that says when use_gpu=True found no GPU.

The GPU itself is chosen by ``horovod_spark.spark.task.gpus.rank_gpu`` (Spark's task resources, then
CUDA_VISIBLE_DEVICES, then the local rank). A rank without a CUDA device trains on CPU; rank 0
then prints one line for the whole job, so a CPU cluster running with the default use_gpu=True
learns it once, not once per rank or per step. The line is a warning of the ``horovod_spark``
logger hierarchy (rank 0's stderr by default, which the driver relays); a fit at verbose=0 leaves it
out unless the user set use_gpu=True (TrainSpec.gpu_notice).
"""
import logging

log = logging.getLogger(__name__)

NO_GPU_LINE = ("horovod_spark: use_gpu=True, but %d of %d rank(s) see no CUDA device (%s); they train on "
               "CPU. Set use_gpu=False to train on CPU without this line.")
TORCH_NO_GPU = "torch.cuda.is_available() is False there"
TENSORFLOW_NO_GPU = "TensorFlow lists no GPU there"


def report_cpu_fallback(hvd, without_gpu: bool, why: str, out=None, quiet: bool = False) -> int:
    """Collective (every rank calls it when use_gpu=True): how many ranks lack a GPU; rank 0 logs
    ``NO_GPU_LINE`` (or writes it to ``out``) when any does, unless ``quiet`` (it already did).

    An elastic fit calls it at every (re)start instead of once before training: a rank that joins
    later runs only the code before the elastic loop, and a collective there that the survivors do
    not repeat would leave every rank waiting on a different collective."""
    missing = sum(1 for flag in hvd.allgather_object(bool(without_gpu), name="estimator.gpu_missing") if flag)
    if missing and not quiet and hvd.rank() == 0:
        if out is None:
            log.warning(NO_GPU_LINE, missing, hvd.size(), why)
        else:
            out.write(NO_GPU_LINE % (missing, hvd.size(), why) + "\n")
            out.flush()
    return missing


def cpu_fallback(use_gpu: bool, gpu_notice: bool, without_gpu: bool, why: str):
    """A trainer's ``cpu_fallback`` for ``report_devices``: (whether this rank has no GPU, why) when
    rank 0 is to say that use_gpu=True found no GPU; None when use_gpu is off, or at verbose=0 when
    use_gpu was left at its default (TrainSpec.gpu_notice). The same on every rank of a fit."""
    return (without_gpu, why) if use_gpu and gpu_notice else None


def report_devices(hvd, cpu_fallback, quiet: bool = False) -> int:
    """``report_cpu_fallback`` for a trainer's ``cpu_fallback``: None when use_gpu=False (nothing to
    report, no collective), else (whether this rank has no GPU, why)."""
    if cpu_fallback is None:
        return 0
    without_gpu, why = cpu_fallback
    return report_cpu_fallback(hvd, without_gpu, why, quiet=quiet)


def torch_device(use_gpu: bool, hvd):
    """The torch device this rank trains on (set as the current CUDA device when it is one); the
    caller reports a missing GPU with ``report_devices``."""
    import torch
    if not use_gpu:
        return torch.device("cpu")
    from horovod_spark.spark.task.gpus import rank_gpu
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = rank_gpu(hvd.local_rank(), count)
    if index is None:
        return torch.device("cpu")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)
