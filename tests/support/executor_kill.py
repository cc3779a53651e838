"""Killing a Spark executor's JVM as a spot reclaim or a node failure would.

From the test's driver: a rank writes its executor JVM's pid to a file; a thread of the test
SIGKILLs that pid once the rank says training is under way (``kill_when_ready``). From an estimator
callback: a rank SIGKILLs its own executor once training reaches a chosen point, triggered by
training progress rather than by a timer; the kill is claimed through a file, so it happens once per
fit even when the job re-forms and the rank number moves to another worker (``KillExecutorAtStep``)."""
import os
import signal
import sys
import threading
import time


def executor_jvm_pid() -> int:
    """The pid of the executor JVM this rank runs under: rank -> Python worker -> daemon -> JVM."""
    pid = os.getpid()
    for _ in range(6):
        with open("/proc/%d/stat" % pid) as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                return pid
    raise RuntimeError("no executor JVM above pid %d" % os.getpid())


def write_executor_pid(pid_file: str) -> None:
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(executor_jvm_pid()))
    os.rename(pid_file + ".tmp", pid_file)


def kill_when_ready(pid_file: str, ready_file: str, timeout: float = 200.0, no_replacements=None) -> dict:
    """Start a thread that SIGKILLs the pid in ``pid_file`` once it and ``ready_file`` exist; the
    returned dict gets the wall time of the kill under "at". ``no_replacements``: a
    ``NoReplacements``, entered just before the kill (the caller exits it)."""
    killed = {}

    def killer():
        deadline = time.monotonic() + timeout
        while not (os.path.exists(pid_file) and os.path.exists(ready_file)):
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)
        if no_replacements is not None:
            no_replacements.__enter__()
        killed["at"] = time.time()
        os.kill(int(open(pid_file).read()), 9)

    threading.Thread(target=killer, daemon=True).start()
    return killed


def _executor_jvms(driver_port: str) -> set:
    """The pids of the executor JVMs of the driver on ``driver_port`` (spark.driver.port): other
    applications' are never touched."""
    port_suffix = b":" + driver_port.encode()
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and any(
                    a.startswith(b"spark://CoarseGrainedScheduler@") and a.endswith(port_suffix) for a in argv):
                found.add(int(name))
    return found


class NoReplacements:
    """While in use, every executor JVM of the driver on ``driver_port`` that the cluster starts
    is stopped (SIGSTOP) before it can register: the cluster has no room to replace a lost
    executor, as when a node is gone for good. On exit the stopped JVMs are killed and the cluster
    starts working ones again."""

    def __init__(self, driver_port: str):
        self._driver_port = driver_port
        self._known = set()
        self._stopped = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._done.is_set():
            for pid in _executor_jvms(self._driver_port) - self._known - self._stopped:
                os.kill(pid, 19)  # SIGSTOP
                self._stopped.add(pid)
            time.sleep(0.02)

    def __enter__(self):
        self._known = _executor_jvms(self._driver_port)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        if self._thread.ident is not None:
            self._thread.join(5)
        for pid in self._stopped:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


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


class AwaitReplacement:
    """An estimator callback (TorchEstimator; ``keras_await_replacement`` for Keras) for after a
    kill (``marker`` exists): at the end of an epoch run on fewer than ``size`` ranks, rank 0 waits
    until the driver has formed a newer generation (the task Spark rescheduled has joined), up to
    ``timeout`` s, so the fit grows back at that epoch's commit however fast the machine trains."""

    def __init__(self, marker: str, size: int, timeout: float = 120.0):
        self.marker, self.size, self.timeout = marker, size, timeout
        self.gave_up = False

    def on_epoch_end(self, epoch, logs=None):
        from horovod_spark.common import basics, elastic_rendezvous
        if self.gave_up or not os.path.exists(self.marker) or basics.rank() != 0 or basics.size() >= self.size:
            return
        mine = basics.elastic_generation()
        deadline = time.monotonic() + self.timeout
        while elastic_rendezvous.newest_generation() <= mine:
            if time.monotonic() >= deadline:
                print("AwaitReplacement: no new generation after generation %d within %.0f s" % (mine, self.timeout),
                      file=sys.stderr, flush=True)
                self.gave_up = True  # once: the test's assertions then say what happened
                return
            time.sleep(0.2)


def keras_await_replacement(marker: str, size: int, timeout: float = 120.0):
    """The KerasEstimator form of ``AwaitReplacement`` (a keras.callbacks.Callback)."""
    import keras

    class AwaitReplacementAtEpochEnd(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.waiter = AwaitReplacement(marker, size, timeout)

        def on_epoch_end(self, epoch, logs=None):
            self.waiter.on_epoch_end(epoch, logs)

    return AwaitReplacementAtEpochEnd()


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
