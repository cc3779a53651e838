"""Checks made on the driver before any Spark job is submitted.

Spark itself only notices that a barrier stage cannot fit after its own retry loop
(spark.scheduler.barrier.maxConcurrentTasksCheck.*: 40 checks 15 s apart, about ten minutes), and
refuses barrier stages under dynamic allocation only at submission. We answer both at once.
"""
import inspect

from horovod_spark import session as spark_session
from horovod_spark.common import config, source_pickle
from horovod_spark.exceptions import HorovodSparkError


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


def _refuse_dynamic_allocation(num_proc: int) -> None:
    raise HorovodSparkError(
        "Spark does not run barrier jobs with dynamic allocation "
        "(spark.dynamicAllocation.enabled=true); disable it (on Databricks: turn off "
        "autoscaling) and give the cluster at least num_proc=%d task slots." % num_proc)


def check_cluster(sc, num_proc: int, log) -> None:
    """Whether ``num_proc`` barrier tasks fit the classic SparkContext ``sc``'s cluster."""
    conf = sc.getConf()
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true" \
            and not sc.master.startswith("local"):
        _refuse_dynamic_allocation(num_proc)
    wait_s = config.SPARK_SLOT_WAIT.get()
    slots = spark_session.available_slots(sc, num_proc, wait_s)
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
                if gpu else "", max(slots, 0), spark_session.bigger_master(sc.master, num_proc * task_cpus)))
    busy = spark_session.busy_slots(sc)
    if busy and slots - busy < num_proc:
        log(1, "%d of %d task slots are busy with other jobs; the %d ranks start when %d are free "
               "(start_timeout applies)" % (busy, slots, num_proc, num_proc))


def check_connect_cluster(session, num_proc: int) -> None:
    """The classic checks for a Spark Connect session, from its configuration alone: task slots
    are exact for local and local-cluster masters, and follow from spark.executor.instances x
    spark.executor.cores / spark.task.cpus where those are set. When they are not, the stage that
    cannot fit shows by never starting (see connect_driver)."""
    if spark_session.dynamic_allocation(session):
        _refuse_dynamic_allocation(num_proc)
    slots = spark_session.known_slots(session)
    if slots is not None and slots < num_proc:
        name, cpus = spark_session.master(session), spark_session.task_cpus(session)
        raise HorovodSparkError(
            "num_proc=%d ranks need %d task slots at once (barrier mode), but this cluster (%s, seen through "
            "Spark Connect) has %d: slots = executors' cores / spark.task.cpus (%d). Lower num_proc to at most "
            "%d, or start the Spark Connect server on a bigger cluster (e.g. %s)."
            % (num_proc, num_proc, name or "unknown master", slots, cpus, max(slots, 0),
               spark_session.bigger_master(name, num_proc * cpus)))


def check_session_cluster(session, num_proc: int, log) -> None:
    """Whether ``num_proc`` barrier tasks fit the cluster of ``session``, of either kind."""
    if spark_session.is_connect_session(session):
        check_connect_cluster(session, num_proc)
    else:
        check_cluster(session.sparkContext, num_proc, log)
