"""The driver's wait for one run(): decides, from the service and the Spark job, how it ended.

Every outcome is decided here: all results in (return them by rank), a rank's failure report
(cancel the job group, abort the other ranks, raise its traceback), a Spark-level task failure no
rank could report (cancel before Spark retries the barrier stage), mpirun dying in MPI mode, or
start_timeout with ranks still unregistered (name them, and say whether Spark even started them).
"""
import time
from typing import Any, List

from horovod_spark.exceptions import HorovodSparkError, SparkRankFailedError, StartTimeoutError
from horovod_spark.spark.driver.results import ResultSpool
from horovod_spark.spark.driver.service import DriverService

from .job import BarrierJob

_STAGE_POLL_S = 1.0
_MPI_POLL_S = 0.2
_MPI_REPORT_GRACE_S = 2.0


def wait_for_outcome(service: DriverService, job: BarrierJob, launcher, start_timeout: float, log,
              spool: ResultSpool) -> List[Any]:
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
            return _collect(service, job, spool)
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
    """The useful part of a Spark job failure: the JVM's reason (py4j's own first line only names
    the JVM call) and, when a Python worker raised, that exception's line from its traceback."""
    if error is None:
        return "(no error reported yet)"
    java = getattr(error, "java_exception", None)
    text = ""
    if java is not None:
        try:
            text = str(java.getMessage() or "")
        except Exception:
            text = ""
    lines = (text or str(error)).splitlines()
    head = " ".join(line.strip() for line in lines[:2] if line.strip())[:600] or type(error).__name__
    marker = "Traceback (most recent call last):"
    start = next((i for i, line in enumerate(lines) if line.endswith(marker)), None)
    if start is not None:
        for line in lines[start + 1:]:
            if line and not line[0].isspace():
                return "%s ... %s" % (head.split(" Traceback")[0], line.strip()[:600])
    return head


# A rank whose peer died fails with this from the core; the peer's own report is the root cause.
# TensorFlow wraps it in its own error type (UnknownError) whose message still names it.
_CONSEQUENTIAL = ("HorovodInternalError",)


def _consequential(failure: dict) -> bool:
    return failure["exc_type"] in _CONSEQUENTIAL or any(
        "%s:" % name in failure["message"] for name in _CONSEQUENTIAL)
# How long a consequential failure waits for the root cause's report. The wait ends as soon as that
# report arrives; its bound only matters when none comes. The failed rank's report can trail its
# peers' by its interpreter's teardown (torch, TensorFlow) and a busy machine's scheduling: seconds.
_ROOT_CAUSE_WAIT_S = 5.0


def _rank_failure(service: DriverService, job: BarrierJob) -> SparkRankFailedError:
    # Cancel before aborting: the DAGScheduler then fails the job before any aborted task can
    # return, so Spark never records a "successful" job or retries the stage.
    if not job.done:
        job.cancel()
    service.abort("another rank failed")
    deadline = time.monotonic() + _ROOT_CAUSE_WAIT_S
    with service.condition:
        # A rank that lost its peer may report before the peer's own traceback arrives.
        service.condition.wait_for(
            lambda: any(not _consequential(f) for f in service.failures)
            or len({f["rank"] for f in service.failures}) >= service.num_proc  # nobody left to report
            or time.monotonic() >= deadline, timeout=_ROOT_CAUSE_WAIT_S)
        failures = list(service.failures)
    first = next((f for f in failures if not _consequential(f)), failures[0])
    others = {f["rank"]: f["exc_type"] for f in failures if f is not first}
    return SparkRankFailedError(first["rank"], first["exc_type"], first["message"], first["traceback"],
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
        "start_timeout (%.3g s) expired: ranks/partitions %s never registered with the driver; %s. "
        "Raise start_timeout (or HOROVOD_SPARK_START_TIMEOUT) if the cluster is just slow."
        % (start_timeout, missing, why), missing, job.group)


def _collect(service: DriverService, job: BarrierJob, spool: ResultSpool) -> List[Any]:
    if job.error is not None:
        with service.condition:
            has_failures = bool(service.failures)
        if has_failures:
            raise _rank_failure(service, job)
        raise HorovodSparkError("the Spark job of run() (group %s) failed outside fn (no rank "
                                "reported an exception; e.g. a task's Python worker or executor "
                                "died): %s" % (job.group, _spark_message(job.error))) from job.error
    finished = set()
    for partition, status, _ in job.results:
        if status != "ok":
            with service.condition:
                has_failures = bool(service.failures)
            if has_failures:  # e.g. the driver refused a result too large to take
                raise _rank_failure(service, job)
            raise HorovodSparkError("rank %d ended with status %r but no failure was reported"
                                    % (partition, status))
        finished.add(partition)
    missing = [r for r in range(service.num_proc) if r not in finished]
    if missing:
        raise HorovodSparkError("the Spark job returned no result for ranks %s" % missing)
    return [spool.load(r) for r in range(service.num_proc)]
