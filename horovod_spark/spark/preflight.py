"""Checks made on the driver before any Spark job is submitted.

Spark itself only notices that a barrier stage cannot fit after its own retry loop
(spark.scheduler.barrier.maxConcurrentTasksCheck.*: 40 checks 15 s apart, about ten minutes), and
refuses barrier stages under dynamic allocation only at submission. We answer both at once.
"""
import inspect
import os
import re
import time
from typing import Optional

from horovod_spark.common import config, source_pickle
from horovod_spark.exceptions import HorovodSparkError

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")
_SETTLE_S = 1.0


def check_num_proc(num_proc, default: int) -> int:
    if num_proc is None:
        num_proc = default
    if isinstance(num_proc, bool) or not isinstance(num_proc, int):
        raise TypeError("num_proc must be a positive int, got %r (%s)" % (num_proc, type(num_proc).__name__))
    if num_proc < 1:
        raise ValueError("num_proc must be >= 1, got %d" % num_proc)
    return num_proc


def serialize_call(fn, args, kwargs) -> bytes:
    """cloudpickle fn with its arguments now, so a closure over a lock or a socket fails here
    with the culprit named instead of inside a Spark task minutes later. Code that travels by
    value takes its file name and source lines along, for the ranks' tracebacks."""
    if not callable(fn):
        raise TypeError("fn must be callable, got %r" % (fn,))
    if not isinstance(args, (tuple, list)):
        raise TypeError("args must be a tuple or list, got %s" % type(args).__name__)
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError("kwargs must be a dict, got %s" % type(kwargs).__name__)
    _check_arguments_fit(fn, args, kwargs or {})
    try:
        return source_pickle.dumps((fn, tuple(args), dict(kwargs or {})))
    except Exception as exc:
        name = getattr(fn, "__qualname__", repr(fn))
        raise HorovodSparkError(
            "cannot send %s to the Spark tasks: it (or its args/kwargs, or a global or closure "
            "variable it uses) cannot be pickled with cloudpickle: %s: %s. Create such objects "
            "(locks, sockets, open files, Spark sessions/contexts, DataFrames) inside fn instead."
            % (name, type(exc).__name__, str(exc).rstrip(". "))) from exc


def _check_arguments_fit(fn, args, kwargs) -> None:
    """A call that cannot bind (a missing or unexpected argument) fails here, not in every rank."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and C functions may have none: the ranks will tell
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        name = getattr(fn, "__qualname__", repr(fn))
        raise TypeError("%s%s cannot be called with args=%s, kwargs=%s: %s"
                        % (name, signature, _short(tuple(args)), _short(kwargs), exc)) from None


def _short(value, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _bigger_master_hint(master: str, cores: int) -> str:
    m = _LOCAL_CLUSTER.match(master)
    if m:
        per_worker = int(m.group(2))
        return "local-cluster[%d,%d,...]" % (-(-cores // per_worker), per_worker)
    return "local[%d]" % cores


def _static_slots(master: str, task_cpus: int) -> Optional[int]:
    """Slots implied by a local master string; None for real cluster managers."""
    m = _LOCAL.match(master)
    if m:
        cores = m.group(1)
        n = 1 if cores is None else (os.cpu_count() or 1) if cores == "*" else int(cores)
        return n // task_cpus
    m = _LOCAL_CLUSTER.match(master)
    if m:
        return int(m.group(1)) * (int(m.group(2)) // task_cpus)
    return None


def _expected_executors(master: str) -> Optional[int]:
    m = _LOCAL_CLUSTER.match(master)
    return int(m.group(1)) if m else None


def _jvm_slots(sc) -> Optional[int]:
    """What the DAGScheduler itself will compare against: counts executors' cores / spark.task.cpus
    and custom resources (GPUs) per task, for the default resource profile."""
    try:
        jsc = sc._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # private[spark] API: gone in some future release, fall back to the master string
        return None


def _executor_count(sc) -> int:
    try:  # the scheduler backend's own table, the one maxNumConcurrentTasks reads
        return int(sc._jsc.sc().getExecutorIds().size())
    except Exception:  # getExecutorInfos comes from the listener bus and lists the driver too
        return max(0, len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1)


def _busy_slots(sc) -> int:
    try:
        return sum(int(e.numRunningTasks()) for e in sc._jsc.sc().statusTracker().getExecutorInfos())
    except Exception:
        return 0


def available_slots(sc, num_proc: int, wait_s: float) -> int:
    master = sc.master
    task_cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    static = _static_slots(master, task_cpus)
    if master == "local" or master.startswith("local["):
        return static if static is not None else (_jvm_slots(sc) or 0)
    # Executors register asynchronously after the session starts: give them a bounded grace
    # (local-cluster: until all its workers' executors are up; a real cluster: until enough slots).
    expected = _expected_executors(master)
    deadline = time.monotonic() + wait_s
    settled_since, last = None, None
    while True:
        slots = _jvm_slots(sc)
        if slots is None:
            return static if static is not None else sc.defaultParallelism // task_cpus
        if slots >= num_proc:
            return slots
        now = time.monotonic()
        if slots != last:
            settled_since, last = now, slots
        # All of local-cluster's executors listed, yet too few slots: a real shortage (GPUs per
        # task) once the count stops changing; the listing can run ahead of the scheduler's own
        # registration, so one look is not enough.
        if expected is not None and _executor_count(sc) >= expected and now - settled_since >= _SETTLE_S:
            return slots
        if now >= deadline:
            return static if static is not None else slots
        time.sleep(0.2)


def check_cluster(sc, num_proc: int, log) -> None:
    conf = sc.getConf()
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true" \
            and not sc.master.startswith("local"):
        raise HorovodSparkError(
            "Spark does not run barrier jobs with dynamic allocation "
            "(spark.dynamicAllocation.enabled=true); disable it (on Databricks: turn off "
            "autoscaling) and give the cluster at least num_proc=%d task slots." % num_proc)
    wait_s = config.SPARK_SLOT_WAIT.get()
    slots = available_slots(sc, num_proc, wait_s)
    task_cpus = int(conf.get("spark.task.cpus", "1"))
    if slots < num_proc:
        gpu = conf.get("spark.task.resource.gpu.amount")
        raise HorovodSparkError(
            "num_proc=%d ranks need %d task slots at once (barrier mode), but this cluster (%s) "
            "has %d: slots = executors' cores / spark.task.cpus (%d)%s. Lower num_proc to at most "
            "%d, or add executors/cores (e.g. %s, more workers, spark.executor.cores), or "
            "lower spark.task.cpus." % (
                num_proc, num_proc, sc.master, slots, task_cpus,
                ", limited also by GPUs per executor / spark.task.resource.gpu.amount (%s)" % gpu
                if gpu else "", max(slots, 0), _bigger_master_hint(sc.master, num_proc * task_cpus)))
    busy = _busy_slots(sc)
    if busy and slots - busy < num_proc:
        log(1, "%d of %d task slots are busy with other jobs; the %d ranks start when %d are free "
               "(start_timeout applies)" % (busy, slots, num_proc, num_proc))
