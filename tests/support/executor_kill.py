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


def keras_kill_callback(marker: str, rank: int, epoch: int, step: int):
    """The KerasEstimator form of ``KillExecutorAtStep`` (a keras.callbacks.Callback)."""
    import keras

    class KillExecutorAtBatch(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epoch = None

        def on_epoch_begin(self, current_epoch, logs=None):
            self.epoch = current_epoch

        def on_train_batch_end(self, batch, logs=None):
            import horovod_spark.keras as hvd
            if hvd.rank() == rank and self.epoch == epoch and batch == step and claim(marker + ".claimed"):
                kill_own_executor(marker)

    return KillExecutorAtBatch()


class ExecutorReaper:
    """Kills every executor JVM of application ``app_id`` that starts after ``arm()``: a cluster
    that cannot replace a lost executor."""

    def __init__(self, app_id: str):
        import threading
        self.app_id = app_id.encode()
        self._known = None
        self.killed = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="executor-reaper", daemon=True)

    def _executors(self):
        found = set()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open("/proc/%s/cmdline" % entry, "rb") as f:
                        cmdline = f.read()
                except OSError:
                    continue
                if b"CoarseGrainedExecutorBackend" in cmdline and self.app_id in cmdline:
                    found.add(int(entry))
        return found

    def arm(self):
        self._known = self._executors()
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.2):
            for pid in self._executors() - self._known:
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append(pid)
                except ProcessLookupError:
                    pass

    def stop(self):
        self._stop.set()
        self._thread.join(5)
