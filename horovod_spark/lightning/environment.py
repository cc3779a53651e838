"""HorovodEnvironment: the Lightning ClusterEnvironment of a horovod_spark job.

The launchers (``horovod_spark.run``, ``run_local``, ``horovod-spark-run``) start the processes and
give each its rank; this environment reports what the core says once ``hvd.init()`` has formed the
job, and forms it on first use if the caller has not. Lightning's setters are accepted only with
the values the job already has: a rank cannot be renumbered from inside the job.
"""
from horovod_spark.lightning.requirement import require_lightning

require_lightning()

from lightning.fabric.plugins.environments import ClusterEnvironment  # noqa: E402

import horovod_spark.torch as hvd  # noqa: E402
from horovod_spark.common import config  # noqa: E402


def join_job():
    """``hvd.init()`` unless this process already belongs to a job (a second init would reset the
    torch layer's unnamed-op counters, which every rank must reset at the same point)."""
    if not hvd.is_initialized():
        hvd.init()


class HorovodEnvironment(ClusterEnvironment):
    """Ranks, sizes and the node index (``hvd.cross_rank()``) of the job this process belongs to."""

    @property
    def creates_processes_externally(self) -> bool:
        # The launcher started every rank; Lightning must not spawn any.
        return True

    @property
    def main_address(self) -> str:
        """The job's rendezvous (KV) service host; horovod_spark needs no torch.distributed master."""
        return config.RENDEZVOUS_ADDR.get() or "127.0.0.1"

    @property
    def main_port(self) -> int:
        """The job's rendezvous (KV) service port, 0 for a single rank started without a launcher."""
        return config.RENDEZVOUS_PORT.get() or 0

    @staticmethod
    def detect() -> bool:
        """True in a process a horovod_spark launcher started (it sets HOROVOD_RANK)."""
        return config.RANK.get() is not None

    def world_size(self) -> int:
        join_job()
        return hvd.size()

    def set_world_size(self, size: int) -> None:
        self._check_unchanged("world size", size, self.world_size())

    def global_rank(self) -> int:
        join_job()
        return hvd.rank()

    def set_global_rank(self, rank: int) -> None:
        self._check_unchanged("global rank", rank, self.global_rank())

    def local_rank(self) -> int:
        join_job()
        return hvd.local_rank()

    def node_rank(self) -> int:
        join_job()
        return hvd.cross_rank()

    @staticmethod
    def _check_unchanged(what, asked, actual):
        if asked != actual:
            raise ValueError("the launcher fixed this process's %s at %d; Lightning asked for %d. Start the job "
                             "with as many ranks as the Trainer should use (num_proc / -np), and leave "
                             "Trainer(num_nodes=...) at its default" % (what, actual, asked))
