"""MPI mode inside a Spark task: run the daemon command mpirun's agent sent us, report its end.

The command arrives on the task's control long poll (see driver_service ``mpi_exec``); the
daemon then forks this task's MPI rank, which finds fn and writes its result through the
HOROVOD_SPARK_WORKDIR we put in the daemon's environment (Open MPI daemons pass their environment
on to the ranks they start).
"""
import threading
from typing import Optional

from horovod_spark.spark.task.rank_process import RankProcess


class MpiDaemonSlot:
    def __init__(self, env: dict, ship, client, rank: int):
        self._env = env
        self._ship = ship
        self._client = client
        self._rank = rank
        self._launched = threading.Event()
        self._reported = False
        self.proc: Optional[RankProcess] = None
        self.seq: Optional[int] = None

    def on_exec(self, seq: int, argv, env) -> None:
        """Called on the control thread for each mpi_exec aimed at this task."""
        if self.proc is not None:
            # One daemon per task is the whole point (one rank per task); refuse a second.
            self._client.request("mpi_done", self._rank, seq, 255)
            return
        self.seq = seq
        self.proc = RankProcess(list(argv), dict(self._env, **env), self._ship)
        self._launched.set()

    def wait_launched(self, timeout: float) -> Optional[RankProcess]:
        self._launched.wait(timeout)
        return self.proc

    def report_exit(self, returncode: int) -> None:
        """Lets mpirun's agent for this task exit with the daemon's status, as ssh would."""
        if self.seq is not None and not self._reported:
            self._reported = True
            self._client.request("mpi_done", self._rank, self.seq, returncode)
