"""The body of each barrier task, run inside Spark's Python worker on an executor.

register with the driver service -> derive placement from the table -> start the rank process
with the rendezvous environment -> stream its output -> report its outcome. A second connection
long-polls the driver's ``control`` op so an abort (another rank failed, run() was interrupted)
reaches us in milliseconds and we kill the rank; losing that connection means the driver is gone,
which is handled the same way, so no rank outlives its run().
"""
import collections
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from horovod_spark.common import config, data_plane_auth, wire
from horovod_spark.common.kv_client import KVClient
from horovod_spark.spark.driver import results
from horovod_spark.spark.mpi.task import MpiDaemonSlot

from . import placement as placement_mod
from . import run_dir
from .control import TaskControl
from .rank_process import RankProcess

_STDERR_TAIL_LINES = 20
# Spark worker plumbing the rank has no use for (and should not see).
DROP_ENV = ("PYTHON_WORKER_FACTORY_SECRET", "_PYSPARK_DRIVER_CONN_INFO_PATH", "SPARK_REUSE_WORKER",
             "PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE")


@dataclass
class TaskSpec:
    """Everything a task needs, shipped inside the Spark closure (so the secret travels the way
    Spark ships the job's code; enable spark.network.crypto/spark.authenticate on untrusted nets)."""
    job_id: str
    driver_addrs: List[str]
    port: int
    key: bytes = field(repr=False)  # the job secret: never in a log line or a traceback
    num_proc: int
    call: bytes
    start_timeout: float
    host_key_mode: str
    env: Dict[str, str] = field(default_factory=dict)
    use_mpi: bool = False
    executable: Optional[str] = None  # the ranks' Python; None: this executor's own
    tls: bool = False  # the driver service speaks TLS (HOROVOD_SPARK_TLS on the driver)
    data_plane_auth: bool = False  # HOROVOD_SPARK_DATA_PLANE_AUTH as the driver resolved it

    @property
    def python(self) -> str:
        return self.executable or sys.executable


def _connect(spec: TaskSpec, io_timeout: float = wire.DEFAULT_IO_TIMEOUT):
    return connect_to_driver(spec.driver_addrs, spec.port, spec.key, "horovod_spark driver service",
                             io_timeout=io_timeout, tls=spec.tls)


def connect_to_driver(addrs, port: int, key: bytes, service: str, io_timeout: float = wire.DEFAULT_IO_TIMEOUT,
                      tls=None):
    """(client, address) of the first of the driver's ``addrs`` that answers a ping on ``port``; a
    ConnectionError naming ``service`` and every address tried when none does."""
    errors = []
    for addr in addrs:
        client = KVClient(addr, port, key, io_timeout=io_timeout, tls=tls)
        try:
            client.request("ping")
            return client, addr
        except (OSError, TimeoutError) as exc:
            client.close()
            errors.append("%s:%d (%s)" % (addr, port, exc))
    raise ConnectionError("this executor (%s) cannot reach the %s at any of: %s. Executors must be able "
                          "to open TCP connections to the driver (spark.driver.host); set "
                          "HOROVOD_SPARK_DRIVER_HOST on the driver to an address they can reach."
                          % (socket.gethostname(), service, "; ".join(errors)))


def _local_address(addr: str, port: int) -> str:
    """The IP this host uses to reach the driver: the interface the other hosts can reach it on."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((addr, port))
        return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        s.close()


def _task_context():
    from pyspark import BarrierTaskContext
    ctx = BarrierTaskContext.get()
    partition = ctx.partitionId()
    # getTaskInfos() reads a property Spark sent with the task: no barrier round trip.
    infos = ctx.getTaskInfos()
    executor = infos[partition].address if partition < len(infos) else ""
    gpu = ctx.resources().get("gpu")
    gpus = list(gpu.addresses) if gpu is not None else []
    return partition, executor, gpus, int(ctx.taskAttemptId())


class _Shipper:
    """Sends output chunks in order with increasing seq (the service drops resent seqs), and keeps
    the tail of stderr for the failure message of a rank that dies without a Python traceback."""

    def __init__(self, client: KVClient, rank: int):
        self._client = client
        self._rank = rank
        self._seq = 0
        self.stderr_tail = collections.deque(maxlen=_STDERR_TAIL_LINES)

    def __call__(self, chunks) -> None:
        for stream, _, data in chunks:
            if stream == "stderr":
                self.stderr_tail.extend(data.decode("utf-8", "replace").splitlines())
        self._client.request("output", self._rank, self._seq, chunks)
        self._seq += 1


def rank_env(spec: TaskSpec, addr: str, place: placement_mod.Placement, gpus: List[str],
             workdir: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env.update(spec.env)
    env.update(place.env())
    env.update({
        config.RENDEZVOUS_ADDR.name: addr,
        config.RENDEZVOUS_PORT.name: str(spec.port),
        config.SECRET_KEY.name: spec.key.hex(),
        config.SPARK_TLS.name: "1" if spec.tls else "0",
        **data_plane_auth.rank_env(spec.data_plane_auth),
        config.RUN_SCOPE.name: spec.job_id,
        config.SPARK_WORKDIR.name: workdir,
        "PYTHONUNBUFFERED": "1",  # lines reach the driver as they are printed, not at exit
    })
    env.setdefault(config.START_TIMEOUT.name, str(int(max(spec.start_timeout, 1))))
    if spec.use_mpi:
        # Under mpirun the rank's identity comes from MPI (hvd.init() then rendezvous over
        # mpi4py); rank_main checks it matches the partition. The rank's parent is mpirun's
        # daemon, not us, so there is no parent pid to check.
        for variable in (config.RANK, config.SIZE):
            env.pop(variable.name)
        env[config.SPARK_EXPECTED_RANK.name] = str(place.rank)
        env[config.SPARK_EXPECTED_SIZE.name] = str(place.size)
    else:
        env[config.SPARK_PARENT_PID.name] = str(os.getpid())
    if gpus:
        # Spark scheduled these GPUs to this task: the rank sees only them (as cuda:0, ...).
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        env[config.SPARK_GPUS.name] = ",".join(gpus)
    return env


def _outcome(workdir: str, returncode: int, shipper: _Shipper, use_mpi: bool):
    result_path = os.path.join(workdir, "result.pkl")
    error_path = os.path.join(workdir, "error.msg")
    if os.path.exists(result_path) and (returncode == 0 or use_mpi):
        return "ok", result_path, None
    if os.path.exists(error_path):
        with open(error_path, "rb") as f:
            exc_type, message, tb = wire.decode_message(f.read())
        return "failed", None, (exc_type, message, tb)
    if use_mpi:
        # mpirun stopped our rank because another one failed (that one reports), or the rank
        # crashed; either way mpirun's own exit status and message reach the driver.
        return "aborted", None, None
    how = "was killed by signal %d" % -returncode if returncode < 0 else "exited with code %d" % returncode
    tail = "\n".join(shipper.stderr_tail)
    return "failed", None, ("ProcessExit", "the rank process %s without a Python exception%s"
                            % (how, "; last stderr lines:\n" + tail if tail else ""), "")


def run_task(spec: TaskSpec, _iterator):
    """mapPartitions body: yields one (partition, status, None); an "ok" rank's result went to the
    driver service already (results.send), never through Spark's task results."""
    partition, executor, gpus, attempt_id = _task_context()
    client, addr = _connect(spec)
    control: Optional[TaskControl] = None
    workdir = None
    proc: Optional[RankProcess] = None
    mpi_slot: Optional[MpiDaemonSlot] = None
    returncode = -1
    try:
        host = placement_mod.host_key(spec.host_key_mode, executor)
        info = {"host": host, "addr": _local_address(addr, spec.port), "pid": os.getpid(),
                "executor": executor, "attempt_id": attempt_id, "gpus": gpus, "python": spec.python}
        # The driver enforces start_timeout; our wait only has to outlast it.
        kind, value = client.request("register", spec.job_id, partition, info, spec.start_timeout + 30.0,
                                     wait=spec.start_timeout + 30.0)
        if kind == "abort":
            return [(partition, "aborted", None)]
        place = placement_mod.compute([entry["host"] for entry in value])[partition]

        workdir = run_dir.create(spec.job_id, partition)
        run_dir.write_private(os.path.join(workdir, "call.pkl"), spec.call)
        shipper = _Shipper(client, partition)
        env = rank_env(spec, addr, place, gpus, workdir)
        if spec.use_mpi:
            mpi_slot = MpiDaemonSlot(env, shipper, client, partition)
        control = TaskControl(spec, addr, partition, on_exec=mpi_slot.on_exec if mpi_slot else None)
        control.start()
        if mpi_slot is not None:
            # mpirun starts once every task registered; its daemon for us arrives by control.
            deadline = time.monotonic() + spec.start_timeout
            while proc is None and time.monotonic() < deadline and control.is_alive():
                proc = mpi_slot.wait_launched(1.0)
            if proc is None:
                if control.abort_reason is not None:
                    return [(partition, "aborted", None)]
                raise TimeoutError("mpirun did not start its daemon in the task of rank %d within "
                                   "start_timeout (%.3g s)" % (partition, spec.start_timeout))
        else:
            proc = RankProcess([spec.python, "-m", "horovod_spark.spark.task.rank_main", workdir],
                               env, shipper)
        control.watch(proc)
        while proc.wait(1.0) is None:
            pass
        returncode = proc.kill_tree()  # reaps what fn forked and left behind
        proc.finish()
        if mpi_slot is not None:
            mpi_slot.report_exit(returncode)
        status, result, error = _outcome(workdir, returncode, shipper, spec.use_mpi)
        stopped_by_us = control.abort_reason is not None or control.lost_driver is not None
        if error is not None and not (stopped_by_us and error[0] == "ProcessExit"):
            # fn's own exception counts even if an abort raced with it: it may be the root cause.
            client.request("failed", partition, *error)
        if control.lost_driver is not None:
            raise ConnectionError("horovod_spark task for rank %d %s" % (partition, control.lost_driver))
        if control.abort_reason is not None:
            return [(partition, "aborted", None)]
        if status == "ok" and results.send(client, partition, result) is not None:
            return [(partition, "aborted", None)]  # the driver refused it and fails the run, naming the size
        return [(partition, status, None)]
    except BaseException as exc:
        # Our own machinery failed (not fn): tell the driver first so it cancels at once rather
        # than Spark retrying the barrier stage; then fail the Spark task too.
        try:
            client.request("failed", partition, type(exc).__name__,
                           "horovod_spark task failed: %s" % exc, traceback.format_exc())
        except Exception:
            pass
        raise
    finally:
        if proc is not None:
            returncode = proc.kill_tree()
            proc.finish(0.5)
        if mpi_slot is not None:
            try:
                mpi_slot.report_exit(returncode)
            except Exception:
                pass
        try:
            client.request("exited", partition, returncode if proc is not None else 0)
        except Exception:
            pass
        if control is not None:
            control.close(2.0)
        client.close()
        if workdir is not None:
            run_dir.remove(workdir)
