"""``TorchDistributor``: pyspark's ``pyspark.ml.torch.distributor.TorchDistributor`` (same
constructor, same ``run``) on horovod_spark's launch.

Existing ``torch.distributed`` code moves unchanged: each rank gets the variables ``torchrun`` sets
(``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ...),
so ``init_process_group("gloo")`` or ``("nccl")`` forms the job. What the launch adds: the task
slots (and GPUs) are checked before anything starts, every rank's output reaches the driver as it is
printed, a failure raises with the failing rank's traceback, Spark Connect sessions work like
classic ones, and ``run`` returns rank 0's result every time (``run_all_ranks``: every rank's).
"""
import numbers
import os
from typing import Any, Callable, List, Union

from horovod_spark.common import gpu_support

from .ddp_rank import RankSettings, run_rank

_TASK_GPUS = "spark.task.resource.gpu.amount"


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError("TorchDistributor(%s=...) takes True or False, got %r" % (name, value))
    return value


class TorchDistributor:
    """Runs a PyTorch training function, or a training script, as ``num_processes`` ranks.

    ``local_mode=True`` starts the ranks as processes on the driver's machine (no Spark job);
    ``local_mode=False`` runs one rank per Spark barrier task on the executors, which must have
    ``num_processes`` free task slots. ``use_gpu=True`` needs a GPU per rank: ``num_processes``
    visible on the driver in local mode, ``spark.task.resource.gpu.amount`` set to 1 otherwise (each
    rank then sees only its task's GPU, as ``cuda:0``); ``use_gpu=False`` hides the GPUs from the
    ranks of a Spark run. As in pyspark, an active SparkSession is needed for ``local_mode=False``.
    """

    def __init__(self, num_processes: int = 1, local_mode: bool = True, use_gpu: bool = True):
        if isinstance(num_processes, bool) or not isinstance(num_processes, numbers.Integral) or num_processes < 1:
            raise ValueError("TorchDistributor(num_processes=...) takes a positive number of processes, got %r"
                             % (num_processes,))
        self.num_processes = int(num_processes)
        self.local_mode = _flag("local_mode", local_mode)
        self.use_gpu = _flag("use_gpu", use_gpu)
        if self.use_gpu:
            self._check_gpus()

    def _check_gpus(self) -> None:
        """GPUs for every rank, checked before anything starts (pyspark's own checks, with the fix)."""
        if self.local_mode:
            visible = gpu_support.device_count("torch")
            if visible < self.num_processes:
                raise RuntimeError(
                    "TorchDistributor(num_processes=%d, local_mode=True, use_gpu=True) needs a GPU per process, "
                    "and torch sees %d on this machine; pass num_processes=%d or fewer, or use_gpu=False to "
                    "train on CPUs" % (self.num_processes, visible, visible))
            return
        from horovod_spark import session as spark_session
        amount = spark_session.conf(spark_session.active_session(), _TASK_GPUS)
        if amount is None or float(amount) < 1:
            raise RuntimeError("TorchDistributor(local_mode=False, use_gpu=True) needs a GPU per Spark task, but %s "
                               "is %s; set it to 1 in the Spark configuration (and give executors GPUs: "
                               "spark.executor.resource.gpu.amount), or pass use_gpu=False"
                               % (_TASK_GPUS, amount or "unset"))
        if float(amount) != 1:
            raise RuntimeError("TorchDistributor runs one process per Spark task, each on one GPU, and %s is %s; "
                               "set it to 1 (num_processes=%d then takes %d tasks)"
                               % (_TASK_GPUS, amount, self.num_processes, self.num_processes))

    def run(self, train_object: Union[Callable, str], *args: Any, **kwargs: Any) -> Any:
        """Run distributed training; return rank 0's result.

        ``train_object``: a function, called as ``train_object(*args, **kwargs)`` on every rank (it
        and its arguments are pickled with cloudpickle); or the path of a Python script, run on
        every rank as ``torchrun`` would run ``python script args...`` (``args`` are its command line,
        converted to strings; no ``kwargs``). Returns the function's return value on rank 0, None
        for a script. A failure on any rank stops the others and raises ``RankFailedError`` with
        that rank's traceback.
        """
        return self.run_all_ranks(train_object, *args, **kwargs)[0]

    def run_all_ranks(self, train_object: Union[Callable, str], *args: Any, **kwargs: Any) -> List[Any]:
        """As ``run``, returning every rank's result as a list indexed by rank."""
        if isinstance(train_object, str):
            if kwargs:
                raise ValueError("TorchDistributor.run(%r, ...) runs a script, which takes command-line arguments "
                                 "only; pass them as strings, e.g. run(path, '--lr', '0.01'), not keywords %s"
                                 % (train_object, sorted(kwargs)))
            train_object = os.path.abspath(train_object)
            if self.local_mode and not os.path.isfile(train_object):
                raise FileNotFoundError("TorchDistributor.run: no training script at %s" % train_object)
        elif not callable(train_object):
            raise TypeError("TorchDistributor.run takes a training function or the path of a training script, "
                            "got %r" % (train_object,))
        payload = (train_object, tuple(args), dict(kwargs), RankSettings(self.local_mode, self.use_gpu))
        caller = "TorchDistributor.run"
        if self.local_mode:
            from horovod_spark.launcher.local_job import run_local_with_options
            from horovod_spark.launcher.options import LocalRunOptions
            return run_local_with_options(run_rank, payload, None,
                                          LocalRunOptions.from_kwargs(caller, num_proc=self.num_processes))
        from horovod_spark.spark.entry import run_with_options
        from horovod_spark.spark.run_options import SparkRunOptions
        options = SparkRunOptions.from_kwargs(caller, num_proc=self.num_processes)
        return run_with_options(run_rank, payload, None, options)

    def __repr__(self):
        return "TorchDistributor(num_processes=%d, local_mode=%r, use_gpu=%r)" % (
            self.num_processes, self.local_mode, self.use_gpu)
