"""Cluster facts for a SparkSession of either kind: a classic one (its SparkContext) or a Spark
Connect client (its configuration only, see connect_cluster.py). The estimators and SparkBackend
use these instead of touching ``sparkContext``, which a Spark Connect session does not have."""
from horovod_spark.exceptions import HorovodSparkError

from . import connect_cluster, preflight
from .connect_session import active_connect_session, is_connect_session


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


def default_parallelism(session) -> int:
    if is_connect_session(session):
        return connect_cluster.default_parallelism(session)
    return int(session.sparkContext.defaultParallelism)


def check_cluster(session, num_proc: int, log) -> None:
    """Whether ``num_proc`` barrier tasks fit, before any Spark job (preflight.check_cluster)."""
    if is_connect_session(session):
        connect_cluster.check_cluster(session, num_proc)
    else:
        preflight.check_cluster(session.sparkContext, num_proc, log)
