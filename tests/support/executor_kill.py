"""Estimator callbacks that SIGKILL the executor JVM a rank runs under, once training reaches a
chosen point: the executor loss an elastic fit must survive, triggered by training progress
rather than by a timer. The kill is claimed through a file, so it happens once per fit even when
the job re-forms and the rank number moves to another worker."""
import os
import signal
import time


def executor_jvm_pid():
    """The pid of the executor JVM this rank runs under: rank -> Python worker -> daemon -> JVM."""
    pid = os.getpid()
    for _ in range(6):
        with open("/proc/%d/stat" % pid) as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                return pid
    raise RuntimeError("no executor JVM above pid %d" % os.getpid())


def claim(marker: str) -> bool:
    """True for the first caller only, across processes (the file system decides)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def kill_own_executor(marker: str) -> None:
    """SIGKILL this rank's executor JVM (recording its pid in ``marker``), then wait to be taken down
    with it: the rank trains no further step."""
    pid = executor_jvm_pid()
    with open(marker, "w") as f:
        f.write(str(pid))
    os.kill(pid, signal.SIGKILL)
    time.sleep(120)


class KillExecutorAtStep:
    """A TorchEstimator callback: rank ``rank`` kills its executor at ``step`` of ``epoch``."""

    def __init__(self, marker: str, rank: int, epoch: int, step: int):
        self.marker, self.rank, self.epoch, self.step = marker, rank, epoch, step
        self.current_rank = None

    def on_train_begin(self, rank, size):
        self.current_rank = rank

    def on_batch_end(self, epoch, step, logs):
        if (self.current_rank == self.rank and epoch == self.epoch and step == self.step
                and claim(self.marker + ".claimed")):
            kill_own_executor(self.marker)
