"""Facts about the Spark session and its cluster, for a session of either kind: a classic one (with
a SparkContext) or a Spark Connect client (its configuration only).

Which session is active, whether a session or a DataFrame is a Spark Connect one, the default
parallelism, the cluster's task slots and executors, and whether dynamic allocation is on. The
checks that refuse a job on these facts live with the Spark runner (``horovod_spark.spark``).
pyspark is imported only when a question needs it, and the Spark Connect client's dependencies
(grpc, ...) only when pyspark has them.
"""
import os
import re
import time
from typing import Optional

from horovod_spark.exceptions import HorovodSparkError

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")
# A local-cluster's slot count is final once it stops changing for this long.
_SETTLE_S = 1.0


# -- which session -------------------------------------------------------------------------------

def _connect_session_class():
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the Spark Connect client packages
        return None
    return ConnectSession


def is_connect_session(session) -> bool:
    """Whether ``session`` is a Spark Connect client session."""
    cls = _connect_session_class()
    return cls is not None and isinstance(session, cls)


def is_connect_dataframe(df) -> bool:
    """Whether ``df`` belongs to a Spark Connect client session."""
    return is_connect_session(getattr(df, "sparkSession", None))


def active_connect_session():
    """This thread's active Spark Connect session, else the client's default one (a session built
    on another thread), or None."""
    cls = _connect_session_class()
    if cls is None:
        return None
    session = cls.getActiveSession()
    if session is None:
        default = getattr(cls, "_get_default_session", None)
        session = default() if default is not None else None
    return session if session is not None and not session.is_stopped else None


def connect_session_in_use():
    """The active session when it is a Spark Connect client (no SparkContext), else None."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    session = SparkSession.getActiveSession()
    if session is not None:
        return session if is_connect_session(session) else None
    from pyspark import SparkContext
    return None if SparkContext._active_spark_context is not None else active_connect_session()


def active_session():
    """This process's active SparkSession, classic or Spark Connect."""
    from pyspark.sql import SparkSession
    session = SparkSession.getActiveSession() or getattr(SparkSession, "_instantiatedSession", None)
    if session is None:
        from pyspark import SparkContext
        if SparkContext._active_spark_context is None:
            session = active_connect_session()
    if session is None:
        raise HorovodSparkError("no active SparkSession: create one first, e.g. SparkSession.builder.master("
                                "'local[4]').getOrCreate() or SparkSession.builder.remote('sc://host:15002')"
                                ".getOrCreate()")
    return session


def active_spark_context(needed_by: str):
    """The classic SparkContext of the active session; ``needed_by`` (e.g. ``horovod_spark.run``)
    names the caller in the error raised when there is none."""
    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise HorovodSparkError("%s needs pyspark installed on the driver" % needed_by) from exc
    session = SparkSession.getActiveSession()
    # getActiveSession is per JVM thread; a session built on another Python thread still counts.
    session = session or getattr(SparkSession, "_instantiatedSession", None)
    if session is not None:
        try:
            return session.sparkContext
        except Exception as exc:
            raise HorovodSparkError(
                "%s needs a classic SparkSession with a SparkContext (barrier RDD jobs); this session does not "
                "offer one (Spark Connect?): %s" % (needed_by, exc)) from exc
    if SparkContext._active_spark_context is not None:
        return SparkContext._active_spark_context
    raise HorovodSparkError(
        "%s needs an active SparkSession; create one first, e.g. "
        "SparkSession.builder.master('local[4]').getOrCreate()" % needed_by)


# -- a session's configuration --------------------------------------------------------------------

def conf(session, key: str, default: Optional[str] = None) -> Optional[str]:
    """A configuration value of ``session`` (either kind), ``default`` when unset, empty or hidden."""
    try:
        value = session.conf.get(key, default)
    except Exception:  # a key the server refuses to show
        return default
    return value if value not in (None, "") else default


def int_conf(session, key: str) -> Optional[int]:
    """An integer configuration value of ``session``, None when unset or not an integer."""
    value = conf(session, key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def master(session) -> str:
    return conf(session, "spark.master", "") or ""


def task_cpus(session) -> int:
    return int_conf(session, "spark.task.cpus") or 1


def dynamic_allocation(session) -> bool:
    """Whether executors come and go with the load (spark.dynamicAllocation.enabled) on a real
    cluster; local masters have fixed executors whatever the setting says."""
    enabled = (conf(session, "spark.dynamicAllocation.enabled", "false") or "").lower() == "true"
    return enabled and not master(session).startswith("local")


# -- task slots ----------------------------------------------------------------------------------

def static_slots(master_url: str, cpus_per_task: int) -> Optional[int]:
    """Slots implied by a local master string; None for real cluster managers."""
    m = _LOCAL.match(master_url)
    if m:
        cores = m.group(1)
        n = 1 if cores is None else (os.cpu_count() or 1) if cores == "*" else int(cores)
        return n // cpus_per_task
    m = _LOCAL_CLUSTER.match(master_url)
    if m:
        return int(m.group(1)) * (int(m.group(2)) // cpus_per_task)
    return None


def bigger_master(master_url: str, cores: int) -> str:
    """A master string like ``master_url`` with at least ``cores`` cores (for error messages)."""
    m = _LOCAL_CLUSTER.match(master_url)
    if m:
        per_worker = int(m.group(2))
        return "local-cluster[%d,%d,...]" % (-(-cores // per_worker), per_worker)
    return "local[%d]" % cores


def expected_executors(master_url: str) -> Optional[int]:
    """How many executors a local-cluster master starts; None for other masters."""
    m = _LOCAL_CLUSTER.match(master_url)
    return int(m.group(1)) if m else None


def known_slots(session) -> Optional[int]:
    """Task slots of the whole cluster as the configuration tells them (the only source a Spark
    Connect client has), or None when it does not tell."""
    cpus = task_cpus(session)
    static = static_slots(master(session), cpus)
    if static is not None:
        return static
    executors, cores = int_conf(session, "spark.executor.instances"), int_conf(session, "spark.executor.cores")
    if executors and cores:
        return executors * (cores // cpus)
    return None


def connect_default_parallelism(session) -> int:
    """A Spark Connect session's default parallelism: spark.default.parallelism, else the known slots."""
    value = int_conf(session, "spark.default.parallelism") or known_slots(session)
    if not value:
        raise HorovodSparkError(
            "num_proc was not given and this Spark Connect session's configuration does not tell how many task "
            "slots the cluster has (no spark.default.parallelism, spark.master %r); pass num_proc" % master(session))
    return value


def default_parallelism(session) -> int:
    """What the number of ranks defaults to: the session's default parallelism (a classic
    SparkContext's, or what a Spark Connect session's configuration tells)."""
    if is_connect_session(session):
        return connect_default_parallelism(session)
    return int(session.sparkContext.defaultParallelism)


def scheduler_slots(sc) -> Optional[int]:
    """What the DAGScheduler itself compares a barrier stage against: executors' cores /
    spark.task.cpus and custom resources (GPUs) per task, for the default resource profile; None
    when this Spark does not offer the answer."""
    try:
        jsc = sc._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # private[spark] API: gone in some future release, fall back to the master string
        return None


def executor_count(sc) -> int:
    """Executors registered with the scheduler of a classic SparkContext (the driver not counted)."""
    try:  # the scheduler backend's own table, the one maxNumConcurrentTasks reads
        return int(sc._jsc.sc().getExecutorIds().size())
    except Exception:  # getExecutorInfos comes from the listener bus and lists the driver too
        return max(0, len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1)


def busy_slots(sc) -> int:
    """Task slots of a classic SparkContext's executors running tasks now."""
    try:
        return sum(int(e.numRunningTasks()) for e in sc._jsc.sc().statusTracker().getExecutorInfos())
    except Exception:
        return 0


def available_slots(sc, num_proc: int, wait_s: float) -> int:
    """The task slots of a classic SparkContext's cluster. Executors register asynchronously after
    the session starts, so this waits up to ``wait_s`` for ``num_proc`` slots (local-cluster: until
    all its workers' executors are up)."""
    master_url = sc.master
    cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    static = static_slots(master_url, cpus)
    if master_url == "local" or master_url.startswith("local["):
        return static if static is not None else (scheduler_slots(sc) or 0)
    expected = expected_executors(master_url)
    deadline = time.monotonic() + wait_s
    settled_since, last = None, None
    while True:
        slots = scheduler_slots(sc)
        if slots is None:
            return static if static is not None else sc.defaultParallelism // cpus
        if slots >= num_proc:
            return slots
        now = time.monotonic()
        if slots != last:
            settled_since, last = now, slots
        # All of local-cluster's executors listed, yet too few slots: a real shortage (GPUs per
        # task) once the count stops changing; the listing can run ahead of the scheduler's own
        # registration, so one look is not enough.
        if expected is not None and executor_count(sc) >= expected and now - settled_since >= _SETTLE_S:
            return slots
        if now >= deadline:
            return static if static is not None else slots
        time.sleep(0.2)
