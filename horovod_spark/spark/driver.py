"""``horovod_spark.run``: run a function as ``num_proc`` Horovod ranks in one Spark barrier stage."""
import functools
import shlex
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional

from horovod_spark.common import config, wire
from horovod_spark.exceptions import HorovodSparkError

from . import preflight
from .driver_service import start_driver_service
from .job import BarrierJob
from .output import OutputSink
from .results import ResultSpool
from .supervise import supervise
from .task import TaskSpec, run_task

# After an abort, how long the ranks get to confirm their processes are gone, and how long the
# cancelled Spark job gets to wind down, before run() raises anyway (with a warning).
_EXIT_CONFIRM_S = 5.0
_JOB_JOIN_S = 8.0


def _spark_context():
    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise HorovodSparkError("horovod_spark.run needs pyspark installed on the driver") from exc
    session = SparkSession.getActiveSession()
    # getActiveSession is per JVM thread; a session built on another Python thread still counts.
    session = session or getattr(SparkSession, "_instantiatedSession", None)
    if session is not None:
        try:
            return session.sparkContext
        except Exception as exc:
            raise HorovodSparkError(
                "horovod_spark.run needs a classic SparkSession with a SparkContext (barrier "
                "RDD jobs); this session does not offer one (Spark Connect?): %s" % exc) from exc
    if SparkContext._active_spark_context is not None:
        return SparkContext._active_spark_context
    raise HorovodSparkError(
        "horovod_spark.run needs an active SparkSession; create one first, e.g. "
        "SparkSession.builder.master('local[4]').getOrCreate()")


def _connect_session():
    """The active session when it is a Spark Connect client (no SparkContext), else None."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    from .connect_session import active_connect_session, is_connect_session
    session = SparkSession.getActiveSession()
    if session is not None:
        return session if is_connect_session(session) else None
    from pyspark import SparkContext
    return None if SparkContext._active_spark_context is not None else active_connect_session()


def _start_timeout(value) -> float:
    if value is None:
        return config.SPARK_START_TIMEOUT.get()
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError("start_timeout must be a number of seconds, got %r" % (value,)) from None
    if not value > 0:
        raise ValueError("start_timeout must be > 0 seconds, got %r" % (value,))
    return value


def _rank_env(env) -> Dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise TypeError("env must be a dict of environment variables for the ranks, got %s"
                        % type(env).__name__)
    out = {}
    for k, v in env.items():
        if not isinstance(k, str) or v is None:
            raise TypeError("env entries must be str -> str (got %r: %r)" % (k, v))
        out[k] = str(v)
    config.check_assignments(out, "env")
    return out


def _with_stall_shutdown(rank_env: Dict[str, str]) -> Dict[str, str]:
    """The ranks' HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: run()'s env, else the driver's, else the Spark
    default. The core's own default (0) only warns, and on Spark a collective some rank never joins
    would then hold the cluster's task slots forever."""
    variable = config.STALL_SHUTDOWN_TIME_SECONDS
    if not rank_env.get(variable.name):
        variable.get()  # a bad value on the driver is refused here, naming the variable
        rank_env[variable.name] = variable.raw() or repr(config.SPARK_STALL_SHUTDOWN_TIME.get())
    return rank_env


def _driver_addresses(sc) -> List[str]:
    override = config.SPARK_DRIVER_HOST.get()
    if override:
        return [override]
    addrs = [sc.getConf().get("spark.driver.host")]
    try:
        import socket
        addrs.append(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    return [a for i, a in enumerate(addrs) if a and a not in addrs[:i]]


def _use_mpi(use_mpi, use_gloo) -> bool:
    if use_mpi and use_gloo:
        raise ValueError("use_mpi=True and use_gloo=True ask for two different transports; pass one of them")
    if use_gloo:
        return False
    if use_mpi is None:
        return config.SPARK_USE_MPI.get()
    return bool(use_mpi)


def _extra_mpi_args(value, use_mpi: bool) -> List[str]:
    if value is None:
        return []
    if not isinstance(value, str):
        raise TypeError("extra_mpi_args must be a string of mpirun arguments, got %s" % type(value).__name__)
    if not use_mpi:
        raise ValueError("extra_mpi_args=%r needs use_mpi=True (without MPI no mpirun runs to take them)" % value)
    return shlex.split(value)


def _nics(value) -> List[str]:
    if value is None:
        return []
    names = [value] if isinstance(value, str) else list(value)
    if not names or any(not isinstance(n, str) or not n.strip() or "," in n for n in names):
        raise ValueError("nics must be network interface names such as ['eth0'], got %r" % (value,))
    return [n.strip() for n in names]


def _executable(value) -> Optional[str]:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError("executable must be the path of a Python interpreter on the executors, got %r" % (value,))
    return value


def run(fn: Callable, args=(), kwargs: Optional[dict] = None, num_proc: Optional[int] = None,
        start_timeout: Optional[float] = None, use_mpi: Optional[bool] = None, use_gloo: Optional[bool] = None,
        extra_mpi_args: Optional[str] = None, env: Optional[Dict[str, str]] = None, stdout=None,
        stderr=None, verbose: int = 1, nics: Optional[Iterable[str]] = None,
        prefix_output_with_timestamp: bool = False, executable: Optional[str] = None) -> List[Any]:
    """Run ``fn(*args, **kwargs)`` as ``num_proc`` ranks in one Spark barrier stage.

    Returns fn's return values as a list indexed by rank. Inside fn, ``hvd.init()`` needs no
    arguments. Each rank runs in its own process started by its Spark task; its stdout/stderr
    lines are printed on the driver as they come, prefixed ``[rank]<stdout>:`` (to ``stdout`` /
    ``stderr`` if given: any object with ``write(str)``). An exception on any rank cancels the
    job and raises ``RankFailedError`` with the rank and remote traceback; ranks that do not all
    start within ``start_timeout`` (default ``HOROVOD_SPARK_START_TIMEOUT`` or 600 s) raise
    ``StartTimeoutError`` naming them. ``env`` adds environment variables to every rank.
    ``use_mpi=True`` starts the ranks with mpirun through the Spark tasks (see docs/spark.md),
    with ``extra_mpi_args`` added to its command line; ``use_gloo=True`` (Horovod's name for its
    own TCP transport) asks for this project's shared-memory/TCP links, the default. ``nics``:
    network interface names the ranks talk over (the first with an IPv4 address on each host).
    ``executable``: the Python interpreter that runs the ranks on the executors (default: the
    executor's own). The parameters are horovod.spark.run's, in its order.
    """
    remote = _connect_session()
    if remote is not None:
        from .connect_driver import run_connect
        return run_connect(remote, fn, args, kwargs, num_proc, start_timeout, use_mpi, use_gloo, extra_mpi_args, env,
                           stdout, stderr, verbose, nics, prefix_output_with_timestamp, executable)
    sc = _spark_context()
    num_proc = preflight.check_num_proc(num_proc, sc.defaultParallelism)
    start_timeout = _start_timeout(start_timeout)
    rank_env = _with_stall_shutdown(_rank_env(env))
    use_mpi = _use_mpi(use_mpi, use_gloo)
    mpi_args = _extra_mpi_args(extra_mpi_args, use_mpi)
    nic_list = _nics(nics)
    if nic_list:
        rank_env[config.GLOO_IFACE.name] = ",".join(nic_list)
    executable = _executable(executable)
    call = preflight.serialize_call(fn, args, kwargs)
    host_mode = config.SPARK_HOST_KEY.get()
    sink = OutputSink(stdout, stderr, prefix_output_with_timestamp)

    def log(level: int, text: str) -> None:
        if verbose >= level:
            sink.runner_message(text)

    preflight.check_cluster(sc, num_proc, log)
    job_id = uuid.uuid4().hex
    key = wire.make_secret()
    addrs = _driver_addresses(sc)
    service = start_driver_service(key, num_proc, job_id, sink, sc.getConf().get("spark.driver.bindAddress"), addrs)
    try:
        spool = ResultSpool(service)
    except BaseException:
        service.stop()
        raise
    bind = service.host
    log(2, "driver service on %s:%d (bound to %s)" % (addrs[0], service.port, bind))
    spec = TaskSpec(job_id=job_id, driver_addrs=addrs, port=service.port, key=key, num_proc=num_proc,
                    call=call, start_timeout=start_timeout, host_key_mode=host_mode, env=rank_env,
                    use_mpi=use_mpi, executable=executable, tls=service.tls is not None)

    def notify():
        with service.condition:
            service.condition.notify_all()

    name = getattr(fn, "__qualname__", type(fn).__name__)
    job = BarrierJob(sc, num_proc, functools.partial(run_task, spec), "horovod_spark-" + job_id,
                     "horovod_spark.run(%s, num_proc=%d)" % (name, num_proc), notify)
    launcher = None
    ok = False
    try:
        if use_mpi:
            from .mpi_launch import MpiLauncher  # checks for mpirun before any job exists
            launcher = MpiLauncher(service, addrs[0], key, num_proc, sink, log, mpi_args, nic_list)
        job.start()
        results = supervise(service, job, launcher, start_timeout, log, spool)
        ok = True
        return results
    finally:
        if not ok and job.started:
            if not job.done:
                job.cancel()
            service.abort("run() on the driver is stopping the job")
            with service.condition:
                registered = sorted(service.registrations)
            stuck = service.wait_exited(registered, _EXIT_CONFIRM_S)
            if stuck:
                log(1, "ranks %s did not confirm their processes exited within %.0f s; Spark kills "
                       "their Python workers, and the rank processes die with them"
                    % (stuck, _EXIT_CONFIRM_S))
        try:
            if launcher is not None:
                launcher.close()
            if not job.join(_JOB_JOIN_S):
                log(1, "the cancelled Spark job group %s is still winding down" % job.group)
            sink.close()
        finally:
            service.stop()
            spool.close()
