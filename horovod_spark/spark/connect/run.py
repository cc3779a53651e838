"""``horovod_spark.run`` from a Spark Connect client: one ``mapInPandas(..., barrier=True)`` stage.

The client only submits the stage and reads its rows; the ranks rendezvous among themselves
through rank 0's task (see connect_task.py), so neither side needs to reach the other. What
differs from a classic session follows from that:

- rank output reaches the client when the stage ends (rank 0's executor log shows it live);
- the client watches the stage through Spark Connect's progress reports: no stage within
  HOROVOD_SPARK_SLOT_WAIT (+20 s) means Spark is refusing the barrier stage for lack of slots,
  and no running task within start_timeout means the stage never got its slots; both cancel the
  operation (``interruptTag``);
- MPI mode is refused: mpirun runs on the driver and needs to reach the executors.
"""
import os
import pickle
import re
import threading
import time
import uuid
from typing import Any, List, Optional

import cloudpickle

from horovod_spark import session as spark_session
from horovod_spark.common import config, data_plane_auth, wire, wire_tls
from horovod_spark.exceptions import HorovodSparkError, SparkRankFailedError, StartTimeoutError
from horovod_spark.spark.driver import preflight
from horovod_spark.spark.driver.output import OutputSink
from horovod_spark.spark.run_options import SparkRunOptions

from .task import SCHEMA, ConnectSpec, stage

_STAGE_GRACE_S = 20.0
_CONSEQUENTIAL = ("HorovodInternalError",)
_INTERRUPT_JOIN_S = 30.0


def _report_interval_s(session) -> Optional[float]:
    """Spark Connect's progress report interval, None when the server sends no reports."""
    text = spark_session.conf(session, "spark.connect.progress.reportInterval", "2s") or "2s"
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|min)?\s*$", text)
    if not m:
        return 2.0
    value = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, None: 0.001}[m.group(2)]
    return value if value > 0 else None


class _ConnectJob:
    """Runs the stage's collect() on its own thread under a tag the main thread can interrupt,
    and records from the progress reports whether the stage exists and has running tasks."""

    def __init__(self, session, df, tag: str):
        self._session = session
        self._df = df
        self.tag = tag
        self.rows = None
        self.error: Optional[BaseException] = None
        self.stage_seen_at: Optional[float] = None
        self.running_at: Optional[float] = None
        self.announced = False
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hs-connect-job:%s" % tag, daemon=True)

    def __call__(self, stages, inflight_tasks, operation_id, done) -> None:
        # Progress handlers are per session; the reports for our operation arrive on our thread.
        if threading.current_thread() is not self._thread:
            return
        now = time.monotonic()
        if stages and self.stage_seen_at is None:
            self.stage_seen_at = now
        if (inflight_tasks or any(s.num_completed_tasks for s in stages or ())) and self.running_at is None:
            self.running_at = now

    def start(self) -> None:
        self._session.registerProgressHandler(self)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._session.addTag(self.tag)
            try:
                self.rows = self._df.collect()
            finally:
                self._session.removeTag(self.tag)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def interrupt(self) -> None:
        try:
            self._session.interruptTag(self.tag)
        except Exception:
            pass
        self._thread.join(_INTERRUPT_JOIN_S)

    def close(self) -> None:
        try:
            self._session.removeProgressHandler(self)
        except Exception:
            pass


def _wait(job: _ConnectJob, num_proc: int, start_timeout: float, stage_wait: Optional[float], log) -> None:
    started = time.monotonic()
    while not job.done.wait(0.2):
        elapsed = time.monotonic() - started
        if stage_wait is not None and job.stage_seen_at is None and elapsed > stage_wait:
            job.interrupt()
            raise HorovodSparkError(
                "Spark did not start the barrier stage of num_proc=%d ranks within %.0f s: a barrier stage needs "
                "%d task slots at once and Spark holds it back while the cluster has fewer (it gives up only after "
                "spark.scheduler.barrier.maxConcurrentTasksCheck.*, about ten minutes). Lower num_proc or add "
                "executors/cores; the operation was interrupted (tag %s)." % (num_proc, stage_wait, num_proc, job.tag))
        if job.running_at is None and job.stage_seen_at is not None and elapsed > start_timeout:
            job.interrupt()
            raise StartTimeoutError(
                "start_timeout (%.3g s) expired before the barrier stage's tasks started: it needs %d free task "
                "slots at once and other jobs may be holding them. Raise start_timeout (or "
                "HOROVOD_SPARK_START_TIMEOUT) if the cluster is just slow." % (start_timeout, num_proc),
                list(range(num_proc)), job.tag)
        if job.running_at is not None and not job.announced:
            job.announced = True
            log(2, "the barrier stage's tasks are running (%.1f s after submission)" % elapsed)


def _print_output(hub: dict, sink: OutputSink, log) -> None:
    for rank, stream, t, data in sorted(hub.get("output", ()), key=lambda c: c[2]):
        sink(rank, [(stream, t, data)])
    if hub.get("output_dropped"):
        log(1, "%d bytes of rank output were dropped (over Spark Connect, output returns with the stage and rank "
               "0's task keeps at most 64 MiB; the rest is in rank 0's executor log)" % hub["output_dropped"])


def _failure_error(reports: dict, hub: Optional[dict], tag: str) -> Optional[SparkRankFailedError]:
    failures = list(hub["failures"]) if hub else []
    reported = {f["rank"] for f in failures}
    for rank, report in sorted(reports.items()):
        if report.get("error") and rank not in reported:
            exc_type, message, tb = report["error"]
            failures.append({"rank": rank, "exc_type": exc_type, "message": message, "traceback": tb,
                             "host": report.get("host", "")})
    if not failures:
        return None
    first = next((f for f in failures if f["exc_type"] not in _CONSEQUENTIAL), failures[0])
    others = {f["rank"]: f["exc_type"] for f in failures if f is not first}
    return SparkRankFailedError(first["rank"], first["exc_type"], first["message"], first["traceback"], tag,
                                first["host"], others)


def _results(rows, num_proc: int, tag: str, sink: OutputSink, log) -> List[Any]:
    reports = {int(row["partition"]): pickle.loads(row["report"]) for row in rows}
    hub = reports.get(0, {}).get("hub")
    if hub is not None:
        _print_output(hub, sink, log)
    sink.close()
    error = _failure_error(reports, hub, tag)
    if error is not None:
        raise error
    if hub is not None and hub.get("missing"):
        raise StartTimeoutError("ranks/partitions %s never registered with rank 0's task within start_timeout; "
                                "check that executors can reach each other (rank 0's task hosts the rendezvous)"
                                % hub["missing"], hub["missing"], tag)
    missing = [r for r in range(num_proc) if r not in reports]
    if missing:
        raise HorovodSparkError("the Spark Connect stage of run() returned no report for ranks %s" % missing)
    bad = {r: reports[r]["status"] for r in range(num_proc) if reports[r]["status"] != "ok"}
    if bad:
        raise HorovodSparkError("ranks ended with statuses %s but no failure was reported" % bad)
    if hub is None:
        raise HorovodSparkError("rank 0's task of the Spark Connect stage returned no results")
    return [cloudpickle.loads(hub["results"][r]) for r in range(num_proc)]


def run_connect(session, fn, args, kwargs, options: SparkRunOptions) -> List[Any]:
    """horovod_spark.run's body for a Spark Connect session."""
    if options.use_mpi or options.mpi_args is not None:
        raise HorovodSparkError(
            "use_mpi=True / extra_mpi_args cannot work over Spark Connect: mpirun runs on the driver and must reach "
            "the executors, and a Spark Connect client neither is the driver nor can reach them. Leave use_mpi unset "
            "(and HOROVOD_SPARK_USE_MPI off) to use horovod_spark's own transport, or use a classic SparkSession.")
    options = options.with_default_num_proc(spark_session.connect_default_parallelism(session)
                                            if options.num_proc is None else options.num_proc)
    num_proc, start_timeout, rank_env = options.num_proc, options.start_timeout, dict(options.rank_env)
    call = preflight.serialize_call(fn, args, kwargs)
    out = options.output
    sink = OutputSink(out.stdout, out.stderr, out.prefix_output_with_timestamp)

    def log(level: int, text: str) -> None:
        if out.verbose >= level:
            sink.runner_message(text)

    preflight.check_connect_cluster(session, num_proc)
    job_id = uuid.uuid4().hex
    spec = ConnectSpec(job_id=job_id, key=wire.make_secret(), num_proc=num_proc, call=call,
                       start_timeout=start_timeout, host_key_mode=config.SPARK_HOST_KEY.get(), env=rank_env,
                       executable=options.executable, tls=wire_tls.enabled(),
                       max_result_bytes=config.SPARK_MAX_RESULT_BYTES.get(),
                       data_plane_auth=data_plane_auth.resolved({**os.environ, **rank_env}))
    df = session.range(0, num_proc, 1, num_proc).mapInPandas(_stage_fn(spec), SCHEMA, barrier=True)
    interval = _report_interval_s(session)
    stage_wait = config.SPARK_SLOT_WAIT.get() + _STAGE_GRACE_S + 2 * interval if interval else None
    job = _ConnectJob(session, df, "horovod_spark-" + job_id)
    log(2, "submitting the barrier stage of %d ranks over Spark Connect (tag %s)" % (num_proc, job.tag))
    ok = False
    try:
        job.start()
        _wait(job, num_proc, start_timeout, stage_wait, log)
        if job.error is not None:
            raise HorovodSparkError("the Spark Connect stage of run() (tag %s) failed outside fn (e.g. a task's "
                                    "Python worker or executor died, or horovod_spark is missing on the executors): "
                                    "%s" % (job.tag, _short(job.error))) from job.error
        results = _results(job.rows, num_proc, job.tag, sink, log)
        ok = True
        return results
    finally:
        if not ok and not job.done.is_set():
            job.interrupt()
        job.close()
        sink.close()


def _stage_fn(spec: ConnectSpec):
    def horovod_spark_ranks(batches):
        return stage(spec, batches)
    return horovod_spark_ranks


def _short(error: BaseException, limit: int = 1500) -> str:
    text = "%s: %s" % (type(error).__name__, error)
    return text if len(text) <= limit else text[:limit] + " ..."
