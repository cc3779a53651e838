"""What a Spark Connect client can learn about the cluster before submitting a barrier stage.

A Connect client has no SparkContext (no status tracker, no executor list), only the session's
configuration. Task slots are exact for local and local-cluster masters; elsewhere they follow
from ``spark.executor.instances`` x ``spark.executor.cores`` / ``spark.task.cpus`` when those are
set. When they are not, run() learns that the stage cannot fit from the stage never starting
(see connect_driver: Spark creates no stage for a barrier job it cannot schedule).
"""
from typing import Optional

from horovod_spark.exceptions import HorovodSparkError

from . import preflight


def _conf(session, key: str, default: Optional[str] = None) -> Optional[str]:
    try:
        value = session.conf.get(key, default)
    except Exception:  # a key the server refuses to show
        return default
    return value if value not in (None, "") else default


def _int_conf(session, key: str) -> Optional[int]:
    value = _conf(session, key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def master(session) -> str:
    return _conf(session, "spark.master", "") or ""


def task_cpus(session) -> int:
    return _int_conf(session, "spark.task.cpus") or 1


def known_slots(session) -> Optional[int]:
    """Task slots of the whole cluster, or None when the configuration does not tell."""
    cpus = task_cpus(session)
    static = preflight._static_slots(master(session), cpus)
    if static is not None:
        return static
    executors, cores = _int_conf(session, "spark.executor.instances"), _int_conf(session, "spark.executor.cores")
    if executors and cores:
        return executors * (cores // cpus)
    return None


def default_parallelism(session) -> int:
    """What num_proc defaults to: spark.default.parallelism, else the known slots."""
    value = _int_conf(session, "spark.default.parallelism") or known_slots(session)
    if not value:
        raise HorovodSparkError(
            "num_proc was not given and this Spark Connect session's configuration does not tell how many task "
            "slots the cluster has (no spark.default.parallelism, spark.master %r); pass num_proc" % master(session))
    return value


def check_cluster(session, num_proc: int) -> None:
    """The classic preflight's checks, from the configuration alone."""
    name = master(session)
    if (_conf(session, "spark.dynamicAllocation.enabled", "false") or "").lower() == "true" \
            and not name.startswith("local"):
        raise HorovodSparkError(
            "Spark does not run barrier jobs with dynamic allocation (spark.dynamicAllocation.enabled=true); "
            "disable it (on Databricks: turn off autoscaling) and give the cluster at least num_proc=%d task "
            "slots." % num_proc)
    slots = known_slots(session)
    if slots is not None and slots < num_proc:
        cpus = task_cpus(session)
        raise HorovodSparkError(
            "num_proc=%d ranks need %d task slots at once (barrier mode), but this cluster (%s, seen through "
            "Spark Connect) has %d: slots = executors' cores / spark.task.cpus (%d). Lower num_proc to at most "
            "%d, or start the Spark Connect server on a bigger cluster (e.g. %s)."
            % (num_proc, num_proc, name or "unknown master", slots, cpus, max(slots, 0),
               preflight._bigger_master_hint(name, num_proc * cpus)))
