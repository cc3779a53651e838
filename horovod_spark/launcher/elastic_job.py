"""``run_elastic_local``: an elastic job whose ranks are processes on this machine.

Each worker is a process of ``run_local_rank`` with HOROVOD_ELASTIC set, supervised on its own (so
workers can be added while the job runs). The loop here watches them: a worker that exits without
reporting a result or an error (killed, crashed, ``os._exit``) is lost, and the driver re-forms the
job from the survivors (their ``hvd.elastic.run`` rolls back and resets). A worker whose function
raised is lost the same way, as Horovod's elastic driver counts any failed worker (there is no task
retry here: ``discover_slots`` may offer its slot again), and the error that ends a job that cannot
go on names every loss, with what each function raised. ``discover_slots``, polled every second, says how
many workers this machine may run now: when it offers more than are running (up to
``max_num_proc``), workers are added and the ranks learn of them at their next commit.
"""
import logging
import os
import sys
import time
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TextIO

from horovod_spark.common import config, source_pickle, wire
from horovod_spark.common.kv_client import KVClient
from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.exceptions import ElasticJobError
from horovod_spark.launcher import run_local_rank
from horovod_spark.launcher.elastic_driver import ElasticDriver
from horovod_spark.launcher.elastic_failures import Failures
from horovod_spark.launcher.local_job import LOCAL_ADDR, rank_environment
from horovod_spark.launcher.options import ElasticLocalOptions
from horovod_spark.launcher.supervisor import RankSupervisor, describe_exit

log = logging.getLogger(__name__)

_POLL_S = 0.05
_DISCOVER_EVERY_S = 1.0


class _ElasticLocalJob:
    """The KV service, the driver and the workers of one ``run_elastic_local`` call."""

    def __init__(self, argv, env, min_num_proc, max_num_proc, reset_limit, elastic_timeout, io):
        self.argv = argv
        self.min_num_proc, self.max_num_proc = min_num_proc, max_num_proc
        self.reset_limit, self.elastic_timeout = reset_limit, elastic_timeout
        self.secret = wire.make_secret()
        self.run_scope = "elastic-" + uuid.uuid4().hex
        self.server = KVStoreServer(self.secret, host=LOCAL_ADDR)
        self.driver = ElasticDriver(self.server)
        self.port = None
        self.base_env = env
        self.io = io
        self.workers: Dict[int, RankSupervisor] = {}
        self.running: List[int] = []      # workers still running, in rank order of the newest generation
        self.finished: List[int] = []
        self.failures = Failures()
        self.resets = 0
        self.last_rank: Dict[int, int] = {}

    def add_workers(self, count: int, count_reset: bool = True, announce: bool = True) -> None:
        """Start ``count`` new workers; ``announce``: form the generation that includes them now
        (False when the caller forms one anyway)."""
        new = list(range(len(self.workers), len(self.workers) + count))
        for worker in new:
            env = rank_environment(0, 1, self.port, self.secret, self.run_scope, self.base_env)
            for variable in (config.RANK, config.SIZE, config.LOCAL_RANK, config.LOCAL_SIZE, config.CROSS_RANK,
                             config.CROSS_SIZE):
                env.pop(variable.name, None)  # the driver assigns these, generation by generation
            env[config.ELASTIC.name] = "1"
            env[config.ELASTIC_WORKER.name] = str(worker)
            env[config.ELASTIC_TIMEOUT.name] = repr(float(self.elastic_timeout))
            supervisor = RankSupervisor([self.argv], [env], first_label=worker, **self.io)
            self.workers[worker] = supervisor
            supervisor.start()
        self.running.extend(new)
        if announce:
            self._form("added worker(s) %s" % new if count_reset else None, count_reset)

    def _form(self, cause: Optional[str], count_reset: bool) -> None:
        if count_reset:
            self.resets += 1
            if self.reset_limit is not None and self.resets > self.reset_limit:
                raise ElasticJobError("the elastic job needed reset %d (%s) but reset_limit=%d; lost so far: %s%s"
                                      % (self.resets, cause, self.reset_limit, self.failures.summary(),
                                         self.failures.traceback_note()))
        generation = self.driver.form(self.running)
        self.last_rank.update({w: r for r, w in enumerate(self.running)})
        if cause:
            log.warning("elastic job: %s; generation %d has %d rank(s): workers %s",
                        cause, generation, len(self.running), self.running)

    def lose(self, worker: int, returncode: int, discover_slots, traceback_text: Optional[str] = None) -> None:
        """``worker`` exited with ``returncode`` (``traceback_text``: its function raised)."""
        what = self.failures.add(worker, self.last_rank.get(worker), describe_exit(returncode), traceback_text)
        self.running.remove(worker)
        self.driver.remove(worker)
        deadline = time.monotonic() + self.elastic_timeout
        while len(self.running) < self.min_num_proc:
            offered = self._offered(discover_slots)
            if offered > len(self.running):
                self.add_workers(min(offered, self.max_num_proc) - len(self.running), announce=False)
                break
            if discover_slots is None or time.monotonic() >= deadline:
                raise ElasticJobError(
                    "the elastic job lost %s; %d rank(s) remain, fewer than min_num_proc=%d%s%s"
                    % (self.failures.summary(), len(self.running), self.min_num_proc,
                       "" if discover_slots is None else
                       " and no slots were offered within elastic_timeout=%.0f s" % self.elastic_timeout,
                       self.failures.traceback_note()))
            time.sleep(_DISCOVER_EVERY_S)
        self._form("lost " + what, count_reset=True)

    def _offered(self, discover_slots) -> int:
        if discover_slots is None:
            return 0
        try:
            return int(discover_slots())
        except Exception as exc:
            log.warning("elastic job: discover_slots() failed (%s); assuming no change", exc)
            return len(self.running)

    def grow_if_offered(self, discover_slots) -> None:
        if self.finished or not self.running:
            return  # the job is ending: ranks that return are not replaced
        target = min(self._offered(discover_slots), self.max_num_proc)
        if target > len(self.running):
            self.add_workers(target - len(self.running))

    def close(self) -> None:
        for supervisor in self.workers.values():
            supervisor.stop()
        self.server.stop()


def run_elastic_local(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
                      num_proc: int = 2, min_num_proc: Optional[int] = None, max_num_proc: Optional[int] = None,
                      reset_limit: Optional[int] = None, elastic_timeout: Optional[float] = None,
                      discover_slots: Optional[Callable[[], int]] = None, env: Optional[Mapping[str, str]] = None,
                      timeout: Optional[float] = None, stdout: Optional[TextIO] = None,
                      stderr: Optional[TextIO] = None, prefix_output: bool = True) -> List[Any]:
    """Run ``fn(*args, **kwargs)`` as an elastic job of ``num_proc`` local ranks; return the results
    of the ranks that finished, by rank. ``fn`` calls ``hvd.init()`` and a function decorated with
    ``hvd.elastic.run``. A lost rank (its process killed or crashed) makes the others roll back to
    their last commit and go on with fewer ranks, never fewer than ``min_num_proc`` (default
    ``num_proc``); ``discover_slots()`` (optional) may offer slots to grow back, up to
    ``max_num_proc`` (default ``num_proc``). ``reset_limit``: how many resets the job may take
    (None: unlimited). ``elastic_timeout`` (default HOROVOD_ELASTIC_TIMEOUT, 600 s): how long a
    reset may wait for enough ranks. A rank whose ``fn`` raised is lost like one that died. Raises
    ``ElasticJobError`` naming every loss (and what each ``fn`` raised) when the job cannot go on.
    """
    options = ElasticLocalOptions.from_kwargs(
        "run_elastic_local", num_proc=num_proc, min_num_proc=min_num_proc, max_num_proc=max_num_proc,
        reset_limit=reset_limit, elastic_timeout=elastic_timeout, discover_slots=discover_slots, env=env,
        timeout=timeout, stdout=stdout, stderr=stderr, prefix_output=prefix_output)
    return run_elastic_local_with_options(fn, args, kwargs, options)


def run_elastic_local_with_options(fn: Callable[..., Any], args: Sequence[Any], kwargs: Optional[Mapping[str, Any]],
                                   options: ElasticLocalOptions) -> List[Any]:
    """``run_elastic_local``'s body, for callers that built and checked the options already."""
    import cloudpickle

    num_proc, timeout, discover_slots = options.num_proc, options.timeout, options.discover_slots
    base = dict(os.environ)
    base.update(options.env)
    payload = source_pickle.dumps((fn, tuple(args), dict(kwargs or {})))
    argv = [sys.executable, "-m", "horovod_spark.launcher.run_local_rank"]
    job = _ElasticLocalJob(argv, base, options.min_num_proc, options.max_num_proc, options.reset_limit,
                           options.elastic_timeout, options.io())
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        job.port = job.server.start()
        scope = run_local_rank.launcher_scope(job.run_scope)
        job.server.put(scope, run_local_rank.SYS_PATH_KEY, wire.encode_message([p for p in sys.path if p]))
        with _client(job) as client:
            client.put_blob(scope, run_local_rank.FN_KEY, payload)
        job.add_workers(num_proc, count_reset=False)
        next_discovery = time.monotonic() + _DISCOVER_EVERY_S
        while job.running:
            for worker in list(job.running):
                supervisor = job.workers[worker]
                failure = supervisor.poll()
                if supervisor.running_ranks():
                    continue
                if failure is None:
                    job.running.remove(worker)
                    job.finished.append(worker)
                    continue
                error = job.server.get_nowait(scope, run_local_rank.error_key(worker))
                job.lose(worker, failure.returncode, discover_slots,
                         error.decode("utf-8", "replace") if error is not None else None)
            if discover_slots is not None and time.monotonic() >= next_discovery:
                next_discovery = time.monotonic() + _DISCOVER_EVERY_S
                job.grow_if_offered(discover_slots)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("run_elastic_local: workers %s still running after timeout=%s s; all ranks "
                                   "were stopped" % (job.running, timeout))
            time.sleep(_POLL_S)
        with _client(job) as client:
            done = sorted(job.finished, key=lambda w: job.last_rank.get(w, w))
            return [cloudpickle.loads(client.get_blob(scope, run_local_rank.result_key(w), 30.0)) for w in done]
    except ElasticJobError as exc:
        job.driver.fail(str(exc))
        raise
    finally:
        job.close()


def _client(job):
    return KVClient(LOCAL_ADDR, job.port, job.secret)
