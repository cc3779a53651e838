"""The driver's service for one run(): the KV rendezvous plus the Spark tasks' control ops.

It is a ``KVStoreServer`` (same secret, same condition), so the core's own rendezvous
(``hvd.init()`` via HOROVOD_RENDEZVOUS_ADDR/PORT) and the runner's ops share one port and one
lock-protected state. Tasks only ever dial the driver, never each other's runner code, so the
only reachability Spark's setup does not already guarantee is executor -> driver, which the core
needs anyway.

Ops added (all arguments are plain wire values; nothing is unpickled):
  register(job_id, partition, info, timeout) -> ("table", [info by rank]) | ("abort", reason)
  control(rank, timeout)                     -> [command, ...]  (long poll; [] on timeout)
  output(rank, seq, [(stream, t, bytes)])    -> None   (idempotent on seq: clients may resend)
  failed(rank, exc_type, message, traceback) -> None
  exited(rank, returncode)                   -> None
  mpi_exec(rank, argv, env) / mpi_done(rank, seq, returncode) / mpi_wait(rank, seq, timeout)
"""
import socket
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from horovod_spark.common import config
from horovod_spark.common.kv_server import KVStoreServer, RequestError
from horovod_spark.common.rendezvous import note_rank_exit

STREAMS = ("stdout", "stderr")


def _need_rank(value, num_proc: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < num_proc:
        raise RequestError("rank must be an int in [0, %d), got %r" % (num_proc, value))
    return value


def _need_timeout(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise RequestError("timeout must be a non-negative number, got %r" % (value,))
    return float(value)


def start_driver_service(key: bytes, num_proc: int, job_id: str, on_output, spark_bind_address: Optional[str],
                         driver_addrs: Sequence[str]) -> "DriverService":
    """The started service of one run(), listening on every interface only when the user asks for
    it (HOROVOD_SPARK_BIND_ANY), else on Spark's own spark.driver.bindAddress when set, else on the
    address the executors are told to dial. An address given in HOROVOD_SPARK_DRIVER_HOST that is
    not this machine's own (a NAT or proxy address) cannot be listened on; then every interface is."""
    return start_listening(lambda host: DriverService(key, num_proc, job_id, on_output, host=host),
                           spark_bind_address, driver_addrs)


def driver_addresses(sc) -> List[str]:
    """The addresses the executors may reach this driver at: HOROVOD_SPARK_DRIVER_HOST when set,
    else Spark's spark.driver.host and this host's own address."""
    override = config.SPARK_DRIVER_HOST.get()
    if override:
        return [override]
    addrs = [sc.getConf().get("spark.driver.host")]
    try:
        addrs.append(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    return [a for i, a in enumerate(addrs) if a and a not in addrs[:i]]


def start_listening(make_service, spark_bind_address: Optional[str], driver_addrs: Sequence[str]):
    """``make_service(host)``, started on the address start_driver_service describes."""
    host = "0.0.0.0" if config.BIND_ANY.get() else (spark_bind_address or driver_addrs[0])
    service = make_service(host)
    try:
        service.start()
    except OSError:
        if host == "0.0.0.0" or spark_bind_address or not config.SPARK_DRIVER_HOST.get():
            raise
        service = make_service("0.0.0.0")
        service.start()
    return service


_INFO_FIELDS = {"host": str, "addr": str, "pid": int, "executor": str, "attempt_id": int,
                "gpus": list, "python": str}


class DriverService(KVStoreServer):
    def __init__(self, key: bytes, num_proc: int, job_id: str,
                 on_output: Callable[[int, List[Tuple[str, float, bytes]]], None],
                 host: str = "0.0.0.0"):
        super().__init__(key, host=host)
        self.num_proc = num_proc
        self.job_id = job_id
        self._on_output = on_output
        # Everything below is guarded by self.condition (shared with the KV store).
        self.registrations: Dict[int, dict] = {}
        self.table: Optional[List[dict]] = None
        self.registered_at: Optional[float] = None
        self.failures: List[dict] = []
        self.exited: Dict[int, int] = {}
        self.abort_reason: Optional[str] = None
        self._output_seq: Dict[int, int] = {}
        self._mpi_commands: Dict[int, List[tuple]] = {}
        self._mpi_results: Dict[Tuple[int, int], int] = {}
        self._mpi_seq = 0
        for op, fn in (("register", self._register), ("control", self._control),
                       ("output", self._output), ("failed", self._failed), ("exited", self._exited),
                       ("mpi_exec", self._mpi_exec), ("mpi_done", self._mpi_done),
                       ("mpi_wait", self._mpi_wait)):
            self.add_handler(op, fn)

    # -- driver side ----------------------------------------------------------------------------
    def abort(self, reason: str) -> None:
        """Tell every task to kill its rank process; they learn it from their control long poll."""
        with self.condition:
            if self.abort_reason is None:
                self.abort_reason = reason
            self.condition.notify_all()

    def missing_partitions(self) -> List[int]:
        with self.condition:
            return [p for p in range(self.num_proc) if p not in self.registrations]

    def wait_exited(self, ranks, timeout: float) -> List[int]:
        """Wait until the given ranks confirmed their process is gone; returns those that did not."""
        deadline = time.monotonic() + timeout
        with self.condition:
            while True:
                left = [r for r in ranks if r not in self.exited]
                remaining = deadline - time.monotonic()
                if not left or remaining <= 0:
                    return left
                self.condition.wait(remaining)

    # -- ops --------------------------------------------------------------------------------------
    def _register(self, job_id, partition, info, timeout):
        if job_id != self.job_id:
            raise RequestError("task of job %r registered with the service of job %r" % (job_id, self.job_id))
        partition = _need_rank(partition, self.num_proc)
        timeout = _need_timeout(timeout)
        if not isinstance(info, dict) or set(info) != set(_INFO_FIELDS):
            raise RequestError("info must be a dict with keys %s" % sorted(_INFO_FIELDS))
        for name, kind in _INFO_FIELDS.items():
            if isinstance(info[name], bool) or not isinstance(info[name], kind):
                raise RequestError("info[%r] must be %s" % (name, kind.__name__))
        with self.condition:
            previous = self.registrations.get(partition)
            if previous is not None and previous["attempt_id"] != info["attempt_id"] \
                    and self.abort_reason is None:
                # A second task attempt for a partition means Spark is retrying the barrier stage
                # after a task failed outside fn (worker crash, lost executor). The first attempt's
                # ranks are gone: fail the run rather than restart half a job.
                self.failures.append({"rank": partition, "exc_type": "SparkStageRetry",
                                      "message": "Spark started a second attempt of this rank's task "
                                                 "(a task of the barrier stage failed outside fn; "
                                                 "see the executor logs)",
                                      "traceback": "", "host": info["host"]})
                self.abort_reason = "Spark retried the barrier stage"
            self.registrations[partition] = dict(info)
            if self.table is None and len(self.registrations) == self.num_proc:
                self.table = [self.registrations[p] for p in range(self.num_proc)]
                self.registered_at = time.monotonic()
            self.condition.notify_all()
            outcome = self.wait_until(
                lambda: ("abort", self.abort_reason) if self.abort_reason is not None
                else ("table", self.table) if self.table is not None else None,
                timeout,
                lambda: "only %d of %d tasks registered within %.0f s; missing partitions %s"
                        % (len(self.registrations), self.num_proc, timeout, self.missing_partitions_locked()))
        return outcome

    def missing_partitions_locked(self) -> List[int]:
        return [p for p in range(self.num_proc) if p not in self.registrations]

    def _control(self, rank, timeout):
        rank = _need_rank(rank, self.num_proc)
        timeout = _need_timeout(timeout)

        def pending():
            if self.abort_reason is not None:
                return [("abort", self.abort_reason)]
            if rank in self.exited:
                return [("stop",)]
            commands = self._mpi_commands.get(rank)
            if commands:
                self._mpi_commands[rank] = []
                return list(commands)
            return None

        with self.condition:
            try:
                return self.wait_until(pending, timeout, lambda: "")
            except TimeoutError:
                return []

    def _output(self, rank, seq, chunks):
        rank = _need_rank(rank, self.num_proc)
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise RequestError("seq must be an int")
        if not isinstance(chunks, list):
            raise RequestError("chunks must be a list")
        for chunk in chunks:
            if (not isinstance(chunk, tuple) or len(chunk) != 3 or chunk[0] not in STREAMS
                    or not isinstance(chunk[1], float) or not isinstance(chunk[2], bytes)):
                raise RequestError("a chunk must be (stream, time, bytes)")
        with self.condition:
            if seq <= self._output_seq.get(rank, -1):
                return None  # a resend after a dropped connection: already printed
            self._output_seq[rank] = seq
        # Printed outside the shared condition, so a slow terminal never stalls rendezvous or
        # failure reports. Order per rank holds anyway: a task sends its next chunk only after
        # this reply.
        self._on_output(rank, chunks)
        return None

    def _failed(self, rank, exc_type, message, traceback):
        rank = _need_rank(rank, self.num_proc)
        for name, value in (("exc_type", exc_type), ("message", message), ("traceback", traceback)):
            if not isinstance(value, str):
                raise RequestError("%s must be a str" % name)
        self.record_failure(rank, exc_type, message, traceback)

    def record_failure(self, rank: int, exc_type: str, message: str, traceback: str = "") -> None:
        """Note a rank's failure (the first per rank counts) and wake run()'s supervisor."""
        with self.condition:
            if not any(f["rank"] == rank for f in self.failures):
                host = self.registrations.get(rank, {}).get("host", "")
                self.failures.append({"rank": rank, "exc_type": exc_type, "message": message,
                                      "traceback": traceback, "host": host})
            self.condition.notify_all()

    def _exited(self, rank, returncode):
        rank = _need_rank(rank, self.num_proc)
        if isinstance(returncode, bool) or not isinstance(returncode, int):
            raise RequestError("returncode must be an int")
        with self.condition:
            self.exited[rank] = returncode
            self.condition.notify_all()
        # Ranks still in hvd.init() waiting for this one learn it will never come (HOROVOD_RUN_SCOPE
        # of the ranks is the job id).
        note_rank_exit(self, self.job_id, rank, returncode)

    # -- MPI launch: the rsh agent on the driver asks a task to start mpirun's daemon -------------
    def _mpi_exec(self, rank, argv, env):
        rank = _need_rank(rank, self.num_proc)
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise RequestError("argv must be a non-empty list of str")
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise RequestError("env must be a dict of str to str")
        with self.condition:
            if rank not in self.registrations:
                raise RequestError("rank %d has not registered; cannot launch on it" % rank)
            self._mpi_seq += 1
            seq = self._mpi_seq
            self._mpi_commands.setdefault(rank, []).append(("exec", seq, list(argv), dict(env)))
            self.condition.notify_all()
        return seq

    def _mpi_done(self, rank, seq, returncode):
        rank = _need_rank(rank, self.num_proc)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (seq, returncode)):
            raise RequestError("seq and returncode must be ints")
        with self.condition:
            self._mpi_results[(rank, seq)] = returncode
            self.condition.notify_all()

    def _mpi_wait(self, rank, seq, timeout):
        rank = _need_rank(rank, self.num_proc)
        timeout = _need_timeout(timeout)
        with self.condition:
            try:
                return self.wait_until(
                    lambda: [self._mpi_results[(rank, seq)]] if (rank, seq) in self._mpi_results
                    else ["aborted"] if self.abort_reason is not None else None,
                    timeout, lambda: "")[0]
            except TimeoutError:
                return None
