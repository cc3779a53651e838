"""What each rank of a ``TorchDistributor`` run does: set the environment ``torchrun`` gives its
processes, so that ``torch.distributed.init_process_group()`` (gloo or NCCL) finds its peers, then
call the training function or run the training script.

Rank 0 picks the ``MASTER_ADDR``/``MASTER_PORT`` of the job (its own reachable address and a free
port) and publishes them on the launch's KV service; the other ranks read them from there. This
module imports neither torch nor pyspark: the user's code does.
"""
import os
import runpy
import socket
import sys
from dataclasses import dataclass
from typing import Any, Dict, Sequence

from horovod_spark.common import config, rendezvous
from horovod_spark.common.kv_client import KVClient

_SCOPE_SUFFIX = ".torch_distributed"
_MASTER_KEY = "master"


@dataclass(frozen=True)
class RankSettings:
    """How the driver asked the ranks to run: on its own machine (``local_mode``: one host, so
    ``LOCAL_RANK`` is the rank) or one rank per Spark task (each task a node of one process, as
    pyspark runs them: ``LOCAL_RANK`` 0, its task's GPUs only); ``use_gpu`` False hides every GPU from
    the ranks of a Spark run, as pyspark does."""
    local_mode: bool
    use_gpu: bool


def _free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _master(rank: int) -> str:
    """``addr:port`` of rank 0's ``torch.distributed`` store, the same on every rank."""
    scope = config.RUN_SCOPE.get() + _SCOPE_SUFFIX
    with KVClient.from_env() as client:
        if rank == 0:
            addr = rendezvous.advertised_address()
            master = "%s:%d" % (addr, _free_port(addr))
            client.put(scope, _MASTER_KEY, master.encode())
            return master
        return client.get(scope, _MASTER_KEY, config.START_TIMEOUT.get()).decode()


def torch_distributed_env(settings: RankSettings) -> Dict[str, str]:
    """The variables ``torchrun`` sets for a worker, for this rank of the launch."""
    rank, size = config.RANK.get(), config.SIZE.get()
    if rank is None or size is None:
        raise RuntimeError("TorchDistributor's ranks run under horovod_spark's launch, which sets %s and %s; "
                           "call TorchDistributor(...).run(...) instead of this module"
                           % (config.RANK.name, config.SIZE.name))
    addr, _, port = _master(rank).rpartition(":")
    if settings.local_mode:
        local_rank, local_size, node_rank = config.LOCAL_RANK.get() or 0, config.LOCAL_SIZE.get() or size, 0
    else:
        local_rank, local_size, node_rank = 0, 1, rank
    env = {
        "MASTER_ADDR": addr, "MASTER_PORT": port, "RANK": rank, "WORLD_SIZE": size,
        "LOCAL_RANK": local_rank, "LOCAL_WORLD_SIZE": local_size, "GROUP_RANK": node_rank, "NODE_RANK": node_rank,
        "ROLE_RANK": rank, "ROLE_WORLD_SIZE": size, "TORCHELASTIC_RUN_ID": config.RUN_SCOPE.get(),
        "TORCHELASTIC_RESTART_COUNT": 0, "TORCHELASTIC_MAX_RESTARTS": 0,
    }
    if not settings.use_gpu and not settings.local_mode:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return {name: str(value) for name, value in env.items()}


def run_script(path: str, argv: Sequence[str]) -> None:
    """Run the script at ``path`` as ``python path argv...`` would: ``__name__ == "__main__"``,
    ``sys.argv``, its folder first on ``sys.path``. A non-zero ``sys.exit`` fails the rank."""
    if not os.path.isfile(path):
        raise FileNotFoundError("TorchDistributor: the training script %s is not on host %s; put it where every "
                                "process that runs a rank can read it (a shared or distributed file system, "
                                "or SparkContext.addFile and SparkFiles.get inside a function)"
                                % (path, socket.gethostname()))
    sys.argv = [path] + [str(arg) for arg in argv]
    sys.path.insert(0, os.path.dirname(path))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise RuntimeError("TorchDistributor: %s exited with %r" % (path, exc.code)) from None


def run_rank(train_object: Any, args: tuple, kwargs: dict, settings: RankSettings) -> Any:
    """The function the launch runs on every rank: the environment, then the training."""
    os.environ.update(torch_distributed_env(settings))
    if isinstance(train_object, str):
        return run_script(train_object, args)
    return train_object(*args, **kwargs)
