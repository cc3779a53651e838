"""``horovod_spark.run``: run a function as ``num_proc`` Horovod ranks in one Spark barrier stage."""
import functools
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional

from horovod_spark import session as spark_session
from horovod_spark.common import config, wire

from . import preflight
from .driver_service import driver_addresses, start_driver_service
from .job import BarrierJob
from .output import OutputSink
from .results import ResultSpool
from .run_options import SparkRunOptions
from .supervise import supervise
from .task import TaskSpec, run_task

# After an abort, how long the ranks get to confirm their processes are gone, and how long the
# cancelled Spark job gets to wind down, before run() raises anyway (with a warning).
_EXIT_CONFIRM_S = 5.0
_JOB_JOIN_S = 8.0


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
    options = SparkRunOptions.from_kwargs(
        "horovod_spark.run", num_proc=num_proc, start_timeout=start_timeout, use_mpi=use_mpi, use_gloo=use_gloo,
        extra_mpi_args=extra_mpi_args, env=env, stdout=stdout, stderr=stderr, verbose=verbose, nics=nics,
        prefix_output_with_timestamp=prefix_output_with_timestamp, executable=executable)
    return run_with_options(fn, args, kwargs, options)


def run_with_options(fn: Callable, args, kwargs: Optional[dict], options: SparkRunOptions) -> List[Any]:
    """``run``'s body for callers that built and checked the options already: a Spark Connect stage
    from a Spark Connect session, else a barrier job of the classic SparkContext."""
    remote = spark_session.connect_session_in_use()
    if remote is not None:
        from .connect_driver import run_connect
        return run_connect(remote, fn, args, kwargs, options)
    sc = spark_session.active_spark_context(options.caller)
    options = options.with_default_num_proc(sc.defaultParallelism)
    num_proc, start_timeout, rank_env, use_mpi = (options.num_proc, options.start_timeout, dict(options.rank_env),
                                                  options.use_mpi)
    executable = options.executable
    call = preflight.serialize_call(fn, args, kwargs)
    host_mode = config.SPARK_HOST_KEY.get()
    out = options.output
    sink = OutputSink(out.stdout, out.stderr, out.prefix_output_with_timestamp)

    def log(level: int, text: str) -> None:
        if out.verbose >= level:
            sink.runner_message(text)

    preflight.check_cluster(sc, num_proc, log)
    job_id = uuid.uuid4().hex
    key = wire.make_secret()
    addrs = driver_addresses(sc)
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
            launcher = MpiLauncher(service, addrs[0], key, num_proc, sink, log, list(options.mpi_args or ()),
                                    list(options.nics))
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
