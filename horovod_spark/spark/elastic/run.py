"""``horovod_spark.run_elastic``: an elastic job whose ranks run in ordinary (non-barrier) Spark tasks.

A barrier stage cannot lose a task without failing whole, so ``run_elastic`` submits one job of
``num_proc`` ordinary tasks. Each task registers with the driver as a worker and runs one rank
process (``elastic_task.py``). The driver cannot see the executors' processes, so ranks send a
heartbeat; a member silent for HOROVOD_SPARK_ELASTIC_HEARTBEAT_TIMEOUT_SECONDS, or whose task
whose rank exited with an error (fn raised, or the process crashed), is lost, and the survivors
re-form the job (``launcher/elastic_driver.py``). A task whose rank failed fails itself, so Spark
runs it again (``spark.task.maxFailures``), as it reschedules the task of an executor that died;
the new attempt registers as a new worker, and the job grows back (up to ``max_num_proc``) at the
ranks' next commit. The job starts once ``min_num_proc`` tasks have registered and every task
Spark has started has, so a cluster with fewer free slots than ``num_proc`` starts it smaller.
The ranks' output reaches the driver as ``run()``'s does (``elastic_output.py``).
"""
import functools
import logging
import os
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from horovod_spark import session as spark_session
from horovod_spark.common import config, data_plane_auth, source_pickle, wire
from horovod_spark.common.kv_client import KVClient
from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.exceptions import ElasticJobError, HorovodSparkError
from horovod_spark.launcher import run_local_rank
from horovod_spark.launcher.elastic_driver import ElasticDriver
from horovod_spark.launcher.elastic_failures import Failures
from horovod_spark.spark.driver.output import OutputSink
from horovod_spark.spark.driver.service import driver_addresses, start_listening
from horovod_spark.spark.run_options import ElasticSparkOptions

from .output import DriverOutput
from .task import OP_EXIT, OP_REGISTER, ElasticTaskSpec, run_elastic_task

log = logging.getLogger(__name__)

# How long the cancelled Spark job gets to wind down before run_elastic returns anyway.
_JOB_JOIN_S = 8.0
_POLL_S = 0.1
# The ranks wait this much longer than the driver for the job to re-form: the driver, which sees a
# loss only after the heartbeat timeout, decides that the job cannot go on and tells the waiting
# ranks why (which ranks were lost), rather than a survivor giving up first with less to say.
_RANK_WAIT_MARGIN_S = 10.0


class _Workers:
    """Registrations and exits reported by the tasks, under the service's condition."""

    def __init__(self, server: KVStoreServer, max_workers: int):
        self._server = server
        self.pending: List[int] = []
        self.registered_at: Dict[int, float] = {}
        self.exits: Dict[int, int] = {}
        self.closed = False
        self.dismissed: set = set()  # workers the job no longer needs: their task ends quietly
        self._next = 0
        self._max_workers = max_workers
        server.add_handler(OP_REGISTER, self._register)
        server.add_handler(OP_EXIT, self._exit)

    def _register(self, partition, attempt, host):
        with self._server.condition:
            if self.closed or self._next >= self._max_workers:
                return -1
            worker, self._next = self._next, self._next + 1
            self.pending.append(worker)
            self.registered_at[worker] = time.monotonic()
            log.info("run_elastic: worker %d is partition %s attempt %s on %s", worker, partition, attempt, host)
            self._server.condition.notify_all()
            return worker

    def _exit(self, worker, returncode):
        """Record the exit; the answer says whether the task of a failed rank should fail, so that
        Spark runs it again to replace the rank (False once the job no longer needs it)."""
        with self._server.condition:
            self.exits[int(worker)] = int(returncode)
            self._server.condition.notify_all()
            return not self.closed and int(worker) not in self.dismissed

    def dismiss(self, worker: int) -> None:
        with self._server.condition:
            self.dismissed.add(worker)

    def take_pending(self) -> List[int]:
        with self._server.condition:
            taken, self.pending = self.pending, []
            return taken


def run_elastic(fn: Callable, args=(), kwargs: Optional[dict] = None, num_proc: Optional[int] = None,
                min_num_proc: Optional[int] = None, max_num_proc: Optional[int] = None,
                start_timeout: Optional[float] = None, elastic_timeout: Optional[float] = None,
                reset_limit: Optional[int] = None, env: Optional[Dict[str, str]] = None, stdout=None, stderr=None,
                verbose: int = 1, nics=None, prefix_output_with_timestamp: bool = False,
                min_np: Optional[int] = None, max_np: Optional[int] = None,
                executable: Optional[str] = None) -> List[Any]:
    """Run ``fn(*args, **kwargs)`` as an elastic job of ``num_proc`` ranks on Spark tasks and return the
    results of the ranks that finished, by rank. ``fn`` calls ``hvd.init()`` and a function decorated
    with ``hvd.elastic.run``. A rank whose task or executor dies, or whose ``fn`` raises, is lost: the
    others roll back to their last commit and go on with fewer ranks (never fewer than
    ``min_num_proc``, default ``num_proc``); the task Spark reschedules or runs again (within
    ``spark.task.maxFailures``) joins again, up to ``max_num_proc`` (default ``num_proc``). The job
    starts with fewer than ``num_proc`` ranks (at least ``min_num_proc``) when the cluster has no
    free slot for the other tasks; they join as Spark starts them. ``reset_limit``: resets allowed
    (None: unlimited); ``elastic_timeout`` (default HOROVOD_ELASTIC_TIMEOUT): how long a reset may
    wait for enough ranks; ``start_timeout`` (default HOROVOD_SPARK_START_TIMEOUT): how long to
    wait for the first ``min_num_proc`` tasks. When the job cannot go on, ``ElasticJobError`` names
    every loss, with what each failed ``fn`` raised. ``nics``: the network interfaces the ranks
    use (as ``run``'s); ``min_np``/``max_np``: Horovod's older names of
    ``min_num_proc``/``max_num_proc``. Each rank's stdout/stderr lines are printed on the driver as
    they come, prefixed ``[worker]<stdout>:`` (to ``stdout``/``stderr`` if given, timestamped with
    ``prefix_output_with_timestamp``); ``verbose=0`` leaves out the driver's own lines about lost
    and joined workers."""
    # Read before anything starts, so a bad value fails here rather than in a running job.
    config.SPARK_ELASTIC_HEARTBEAT_TIMEOUT.get()
    options = ElasticSparkOptions.from_kwargs(
        "horovod_spark.run_elastic", num_proc=num_proc, min_num_proc=min_num_proc, max_num_proc=max_num_proc,
        start_timeout=start_timeout, elastic_timeout=elastic_timeout, reset_limit=reset_limit, env=env,
        stdout=stdout, stderr=stderr, verbose=verbose, nics=nics,
        prefix_output_with_timestamp=prefix_output_with_timestamp, min_np=min_np, max_np=max_np,
        executable=executable)
    return run_elastic_with_options(fn, args, kwargs, options)


def run_elastic_with_options(fn: Callable, args, kwargs: Optional[dict], options: ElasticSparkOptions) -> List[Any]:
    """``run_elastic``'s body for callers that built and checked the options already."""
    import cloudpickle

    lost_after = config.SPARK_ELASTIC_HEARTBEAT_TIMEOUT.get()
    sc = spark_session.active_spark_context(options.caller)
    options = options.with_default_num_proc(sc.defaultParallelism)
    num_proc, min_num_proc, max_num_proc = options.num_proc, options.min_num_proc, options.max_num_proc
    reset_limit, start_timeout, elastic_timeout = options.reset_limit, options.start_timeout, options.elastic_timeout
    rank_env, executable, out = dict(options.rank_env), options.executable, options.output
    job_id = "elastic-" + uuid.uuid4().hex
    secret = wire.make_secret()
    addrs = driver_addresses(sc)
    server = start_listening(lambda host: KVStoreServer(secret, host=host),
                             sc.getConf().get("spark.driver.bindAddress"), addrs)
    port = server.port
    edriver = ElasticDriver(server)
    sink = OutputSink(out.stdout, out.stderr, out.prefix_output_with_timestamp)
    DriverOutput(server, sink)
    # Every task attempt Spark may make (spark.task.maxFailures per partition) can become a worker.
    workers = _Workers(server, num_proc * max(1, int(sc.getConf().get("spark.task.maxFailures", "4"))))
    group = "horovod_spark.run_elastic." + job_id
    outcome: Dict[str, Any] = {}
    thread = None
    try:
        scope = run_local_rank.launcher_scope(job_id)
        server.put(scope, run_local_rank.SYS_PATH_KEY, wire.encode_message([p for p in sys.path if p]))
        payload = source_pickle.dumps((fn, tuple(args), dict(kwargs or {})))
        _put_blob(server, scope, run_local_rank.FN_KEY, payload)
        # Every executor's ranks get the driver's data-plane setting, whatever their own environment says.
        rank_env.update(data_plane_auth.rank_env(data_plane_auth.resolved({**os.environ, **rank_env})))
        spec = ElasticTaskSpec(job_id, addrs, port, secret, elastic_timeout + lost_after + _RANK_WAIT_MARGIN_S,
                               rank_env, executable)

        def spark_job():
            try:
                sc.setJobGroup(group, "horovod_spark.run_elastic (%d ranks)" % num_proc, interruptOnCancel=True)
                sc.parallelize(range(num_proc), num_proc).mapPartitions(
                    functools.partial(run_elastic_task, spec)).collect()
            except BaseException as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=spark_job, name="run_elastic-job", daemon=True)
        thread.start()
        say = sink.runner_message if out.verbose else (lambda text: None)
        return _drive(server, secret, edriver, workers, scope, num_proc, min_num_proc, max_num_proc, reset_limit,
                      start_timeout, elastic_timeout, outcome, say, lost_after, cloudpickle,
                      functools.partial(_started_on_a_full_cluster, sc, group))
    except ElasticJobError as exc:
        edriver.fail(str(exc))
        raise
    finally:
        with server.condition:
            workers.closed = True
        try:
            sc.cancelJobGroup(group)
        except Exception:
            pass
        if thread is not None:
            thread.join(_JOB_JOIN_S)  # the cancelled job's tasks end their rank processes
        server.stop()
        sink.close()


def _put_blob(server, scope, key, data):
    chunk = 16 * 1024 * 1024
    n = max(1, -(-len(data) // chunk))
    for i in range(n):
        server.put(scope, "%s#%d" % (key, i), data[i * chunk:(i + 1) * chunk])
    server.put(scope, key, b"%d" % n)


def _drive(server, secret, edriver, workers, scope, num_proc, min_num_proc, max_num_proc, reset_limit, start_timeout,
           elastic_timeout, outcome, say, lost_after, cloudpickle, started_tasks):
    running: List[int] = []
    finished: List[int] = []
    failures = Failures()
    last_rank: Dict[int, int] = {}
    resets = 0

    def silent(worker):
        # A task that has not sent a heartbeat yet gets start_timeout from its registration.
        return edriver.silent_since(worker, workers.registered_at[worker] + start_timeout)

    def form(cause):
        generation = edriver.form(running)
        last_rank.update({w: r for r, w in enumerate(running)})
        if cause:
            say("run_elastic: %s; generation %d has %d rank(s)" % (cause, generation, len(running)))

    deadline = time.monotonic() + start_timeout
    while len(running) < num_proc:
        running.extend(workers.take_pending())
        if "error" in outcome:
            raise HorovodSparkError("run_elastic's Spark job failed before the ranks started: %s" % outcome["error"])
        if len(running) >= min_num_proc and _every_started_task_registered(len(running), started_tasks):
            # The cluster has no free slot for the other tasks now (a small or autoscaling
            # cluster): start with these; the others join at a commit once Spark starts them.
            break
        if time.monotonic() >= deadline:
            if len(running) >= min_num_proc:
                break
            raise ElasticJobError("run_elastic: only %d of %d tasks started within start_timeout=%.0f s (min_num_proc"
                                  "=%d)" % (len(running), num_proc, start_timeout, min_num_proc))
        time.sleep(_POLL_S)
    if len(running) < num_proc:
        say("run_elastic: starting with %d of %d rank(s) (min_num_proc=%d): the cluster has no free task slot for "
            "the others yet; they join as Spark starts their tasks" % (len(running), num_proc, min_num_proc))
    form(None)
    wait_for_slots_until = None
    said_job_ended = False
    # Tasks that registered while the job was full. Spark can start the replacement of a lost task
    # before the lost rank's heartbeat has run out; turned away, its task would end and nothing
    # would replace the rank, so it waits here and joins once a rank is declared lost.
    standby: List[int] = []
    while running:
        changed = []
        if "error" in outcome and not said_job_ended:
            # Spark gave up on the job (e.g. a partition failed spark.task.maxFailures times): no
            # lost rank can be replaced any more, and Spark stops the tasks still running.
            said_job_ended = True
            say("run_elastic: the Spark job failed, so no lost rank can be replaced: %s"
                % _without_java_stack(outcome["error"]))
        for worker in list(running):
            code = workers.exits.get(worker)
            quiet_for = silent(worker)
            if code == 0:
                running.remove(worker)
                finished.append(worker)
                for late in _joined_after(edriver, worker, running):
                    # It joined a generation the finished ranks never took: it would wait for them
                    # forever. The job is ending; the task is cancelled with the others.
                    running.remove(late)
                    workers.dismiss(late)
                    edriver.remove(late)
                continue
            if code is None and quiet_for < lost_after:
                continue
            # A function that raised loses its worker like a process that died (Horovod's
            # semantics): its task fails and Spark runs it again, within spark.task.maxFailures.
            error = server.get_nowait(scope, run_local_rank.error_key(worker))
            how = "exited with code %d" % code if code is not None else "was silent for %.0f s" % quiet_for
            entry = failures.add(worker, last_rank.get(worker), how,
                                 error.decode("utf-8", "replace") if error is not None else None)
            changed.append("lost " + entry)
            running.remove(worker)
            edriver.remove(worker)
            wait_for_slots_until = time.monotonic() + elastic_timeout
        standby += workers.take_pending()
        for worker in list(standby):
            gone = workers.exits.get(worker) is not None or silent(worker) >= lost_after
            if finished or gone:
                standby.remove(worker)
                workers.dismiss(worker)
                edriver.remove(worker)  # the job is finishing, or the task is gone: no rank for it
        while standby and len(running) < max_num_proc:
            worker = standby.pop(0)
            running.append(worker)
            changed.append("worker %d joined" % worker)
        if running and len(running) < min_num_proc and not finished:
            # The survivors wait in hvd.init() until enough tasks join, or the job fails. (Ranks
            # that finished leave fewer running without a loss: the job is ending, not waiting.)
            if time.monotonic() >= wait_for_slots_until:
                raise ElasticJobError("run_elastic lost %s; %d rank(s) remain, fewer than min_num_proc=%d, and "
                                      "no task joined within elastic_timeout=%.0f s%s"
                                      % (failures.summary(), len(running), min_num_proc, elastic_timeout,
                                         failures.traceback_note()))
        elif changed and running:
            resets += 1
            if reset_limit is not None and resets > reset_limit:
                raise ElasticJobError("run_elastic needed reset %d (%s) but reset_limit=%d; lost: %s%s"
                                      % (resets, ", ".join(changed), reset_limit, failures.summary(),
                                         failures.traceback_note()))
            form(", ".join(changed))
        time.sleep(_POLL_S)
    for worker in standby:
        workers.dismiss(worker)
        edriver.remove(worker)
    if not finished:
        spark_error = "; the Spark job failed: %s" % _without_java_stack(outcome["error"]) if "error" in outcome else ""
        raise ElasticJobError("run_elastic: every rank was lost: %s%s%s"
                              % (failures.summary(), spark_error, failures.traceback_note()))
    with KVClient(server.host if server.host != "0.0.0.0" else "127.0.0.1", server.port, secret) as client:
        done = sorted(finished, key=lambda w: last_rank.get(w, w))
        return [cloudpickle.loads(client.get_blob(scope, run_local_rank.result_key(w), 30.0)) for w in done]


def _started_on_a_full_cluster(sc, group: str) -> Optional[int]:
    """How many tasks of the job group Spark runs now, when the cluster has no free task slot
    for more of them; None while it has one, or while Spark's status does not say."""
    slots = spark_session.scheduler_slots(sc)
    if slots is None or spark_session.busy_slots(sc) < slots:
        return None
    tracker = sc.statusTracker()
    active, known = 0, False
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                active, known = active + stage.numActiveTasks, True
    return active if known else None


def _every_started_task_registered(registered: int, started_tasks) -> bool:
    """True when the tasks that have not registered cannot start now: every task Spark runs has
    registered and the cluster has no free slot (Spark's status lags behind, never ahead, so a
    task it has not counted yet only delays the start)."""
    try:
        started = started_tasks()
    except Exception:  # the status is advice only: without it, wait for num_proc or start_timeout
        return False
    return started is not None and registered >= started


def _joined_after(edriver, finished_worker: int, running: List[int]) -> List[int]:
    """The running workers that never took the generation ``finished_worker`` finished in, nor an
    older one."""
    done_in = edriver.assigned.get(finished_worker)
    return [w for w in running if done_in is not None and edriver.assigned.get(w, done_in + 1) > done_in]


def _without_java_stack(exc) -> str:
    """A Spark job's error without the JVM's stack trace, which says nothing to the user here."""
    return " ".join(line.strip() for line in str(exc).splitlines() if not line.lstrip().startswith("at "))[:2000]
