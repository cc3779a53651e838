"""``horovod_spark.run``: run a function as ``num_proc`` Horovod ranks in one Spark barrier stage."""
import functools
import os
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

import cloudpickle

from horovod_spark.common import wire

from . import placement, preflight
from .driver_service import DriverService
from .errors import HorovodSparkError, RankFailedError, StartTimeoutError
from .job import BarrierJob
from .output import OutputSink
from .task import TaskSpec, run_task

DEFAULT_START_TIMEOUT = 600.0
# After an abort, how long the ranks get to confirm their processes are gone, and how long the
# cancelled Spark job gets to wind down, before run() raises anyway (with a warning).
_EXIT_CONFIRM_S = 5.0
_JOB_JOIN_S = 8.0
_STAGE_POLL_S = 1.0
_MPI_POLL_S = 0.2
_MPI_REPORT_GRACE_S = 2.0


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


def _start_timeout(value) -> float:
    source = "start_timeout"
    if value is None:
        value = os.environ.get("HOROVOD_SPARK_START_TIMEOUT", DEFAULT_START_TIMEOUT)
        source = "HOROVOD_SPARK_START_TIMEOUT"
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError("%s must be a number of seconds, got %r" % (source, value)) from None
    if not value > 0:
        raise ValueError("%s must be > 0 seconds, got %r" % (source, value))
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
    return out


def _driver_addresses(sc) -> List[str]:
    override = os.environ.get("HOROVOD_SPARK_DRIVER_HOST")
    if override:
        return [override]
    addrs = [sc.getConf().get("spark.driver.host")]
    try:
        import socket
        addrs.append(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    return [a for i, a in enumerate(addrs) if a and a not in addrs[:i]]


def _use_mpi(value) -> bool:
    if value is None:
        return os.environ.get("HOROVOD_SPARK_USE_MPI", "").lower() in ("1", "true", "yes")
    return bool(value)


def run(fn: Callable, args=(), kwargs: Optional[dict] = None, num_proc: Optional[int] = None,
        start_timeout: Optional[float] = None, env: Optional[Dict[str, str]] = None, stdout=None,
        stderr=None, verbose: int = 1, use_mpi: Optional[bool] = None,
        prefix_output_with_timestamp: bool = False) -> List[Any]:
    """Run ``fn(*args, **kwargs)`` as ``num_proc`` ranks in one Spark barrier stage.

    Returns fn's return values as a list indexed by rank. Inside fn, ``hvd.init()`` needs no
    arguments. Each rank runs in its own process started by its Spark task; its stdout/stderr
    lines are printed on the driver as they come, prefixed ``[rank]<stdout>:`` (to ``stdout`` /
    ``stderr`` if given: any object with ``write(str)``). An exception on any rank cancels the
    job and raises ``RankFailedError`` with the rank and remote traceback; ranks that do not all
    start within ``start_timeout`` (default ``HOROVOD_SPARK_START_TIMEOUT`` or 600 s) raise
    ``StartTimeoutError`` naming them. ``env`` adds environment variables to every rank.
    ``use_mpi=True`` starts the ranks with mpirun through the Spark tasks (see docs/spark.md).
    """
    sc = _spark_context()
    num_proc = preflight.check_num_proc(num_proc, sc.defaultParallelism)
    start_timeout = _start_timeout(start_timeout)
    rank_env = _rank_env(env)
    call = preflight.serialize_call(fn, args, kwargs)
    host_mode = placement.host_key_mode(os.environ.get(placement.HOST_KEY_ENV))
    use_mpi = _use_mpi(use_mpi)
    sink = OutputSink(stdout, stderr, prefix_output_with_timestamp)

    def log(level: int, text: str) -> None:
        if verbose >= level:
            sink.runner_message(text)

    preflight.check_cluster(sc, num_proc, log)
    job_id = uuid.uuid4().hex
    key = wire.make_secret()
    bind = sc.getConf().get("spark.driver.bindAddress") or "0.0.0.0"
    service = DriverService(key, num_proc, job_id, sink, host=bind)
    service.start()
    addrs = _driver_addresses(sc)
    log(2, "driver service on %s:%d (bound to %s)" % (addrs[0], service.port, bind))
    spec = TaskSpec(job_id=job_id, driver_addrs=addrs, port=service.port, key=key, num_proc=num_proc,
                    call=call, start_timeout=start_timeout, host_key_mode=host_mode, env=rank_env,
                    use_mpi=use_mpi)

    def notify():
        with service.condition:
            service.condition.notify_all()

    name = getattr(fn, "__qualname__", type(fn).__name__)
    job = BarrierJob(sc, num_proc, functools.partial(run_task, spec), "horovod_spark-" + job_id,
                     "horovod_spark.run(%s, num_proc=%d)" % (name, num_proc), notify)
    launcher = None
    ok = False
    try:
        job.start()
        if use_mpi:
            from .mpi_launch import MpiLauncher
            launcher = MpiLauncher(service, addrs[0], key, num_proc, sink, log)
        results = _supervise(service, job, launcher, start_timeout, log)
        ok = True
        return results
    finally:
        if not ok:
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
        if launcher is not None:
            launcher.close()
        if not job.join(_JOB_JOIN_S):
            log(1, "the cancelled Spark job group %s is still winding down" % job.group)
        sink.close()
        service.stop()


def _supervise(service: DriverService, job: BarrierJob, launcher, start_timeout: float, log) -> List[Any]:
    started = time.monotonic()
    deadline = started + start_timeout
    next_stage_poll = started + _STAGE_POLL_S
    announced = False
    while True:
        wait_s = min(next_stage_poll, deadline) - time.monotonic()
        if launcher is not None:
            wait_s = min(wait_s, _MPI_POLL_S)  # mpirun's exit does not notify the condition
        with service.condition:
            service.condition.wait_for(
                lambda: service.failures or job.done
                or (service.table is None and time.monotonic() >= deadline),
                timeout=max(0.05, wait_s))
            failures = list(service.failures)
            table_ready = service.table is not None
        if failures:
            raise _rank_failure(service, job)
        if job.done:
            return _collect(service, job)
        if not table_ready and time.monotonic() >= deadline:
            raise _start_timeout_error(service, job, start_timeout)
        if launcher is not None and table_ready:
            launcher.poll()
            if launcher.exited_at is not None and launcher.returncode != 0:
                # The failed rank's own report (with its traceback) may be a moment behind.
                if time.monotonic() - launcher.exited_at < _MPI_REPORT_GRACE_S:
                    continue
                if not job.done:
                    job.cancel()
                raise HorovodSparkError(launcher.failure_message())
        now = time.monotonic()
        if now >= next_stage_poll:
            next_stage_poll = now + _STAGE_POLL_S
            if job.stage_failures() > 0:
                # A Spark-level task failure (worker crash, lost executor) that no rank could
                # report: Spark would now retry the whole barrier stage, for minutes.
                job.join(2.0)
                if service.failures:
                    raise _rank_failure(service, job)
                if not job.done:
                    job.cancel()
                raise HorovodSparkError(
                    "a task of the barrier stage (job group %s) failed in Spark outside fn, e.g. "
                    "its Python worker or executor died; the job was cancelled instead of letting "
                    "Spark retry the stage. Spark said: %s" % (job.group, _spark_message(job.error)))
            if table_ready and not announced:
                announced = True
                log(2, "all %d ranks registered after %.1f s" % (service.num_proc, service.registered_at - started))


def _spark_message(error) -> str:
    if error is None:
        return "(no error reported yet)"
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _rank_failure(service: DriverService, job: BarrierJob) -> RankFailedError:
    # Peers of a failed rank fail a moment later ("peer lost"); stop them before reading the list,
    # and give the first failure the headline.
    # Cancel before aborting: the DAGScheduler then fails the job before any aborted task can
    # return, so Spark never records a "successful" job or retries the stage.
    if not job.done:
        job.cancel()
    service.abort("another rank failed")
    with service.condition:
        failures = list(service.failures)
    first = failures[0]
    others = {f["rank"]: f["exc_type"] for f in failures[1:]}
    return RankFailedError(first["rank"], first["exc_type"], first["message"], first["traceback"],
                           job.group, first["host"], others)


def _start_timeout_error(service: DriverService, job: BarrierJob, start_timeout: float) -> StartTimeoutError:
    missing = service.missing_partitions()
    launched = job.launched_tasks()
    if launched == 0:
        why = ("Spark never started the barrier stage's tasks: it needs %d free task slots at once "
               "and other jobs may be holding them, or executors were lost"
               % service.num_proc)
    else:
        why = ("their Spark tasks started (%d of %d) but never reached the driver service: check "
               "that executors can connect to the driver (HOROVOD_SPARK_DRIVER_HOST) and that "
               "horovod_spark is installed on them (executor logs)" % (launched, service.num_proc))
    if not job.done:
        job.cancel()
    service.abort("start timeout")
    return StartTimeoutError(
        "start_timeout (%.0f s) expired: ranks/partitions %s never registered with the driver; %s. "
        "Raise start_timeout (or HOROVOD_SPARK_START_TIMEOUT) if the cluster is just slow."
        % (start_timeout, missing, why), missing, job.group)


def _collect(service: DriverService, job: BarrierJob) -> List[Any]:
    if job.error is not None:
        with service.condition:
            has_failures = bool(service.failures)
        if has_failures:
            raise _rank_failure(service, job)
        raise HorovodSparkError("the Spark job of run() (group %s) failed: %s"
                                % (job.group, _spark_message(job.error))) from job.error
    by_rank = {}
    for partition, status, payload in job.results:
        if status != "ok":
            raise HorovodSparkError("rank %d ended with status %r but no failure was reported"
                                    % (partition, status))
        by_rank[partition] = payload
    missing = [r for r in range(service.num_proc) if r not in by_rank]
    if missing:
        raise HorovodSparkError("the Spark job returned no result for ranks %s" % missing)
    return [cloudpickle.loads(by_rank[r]) for r in range(service.num_proc)]
