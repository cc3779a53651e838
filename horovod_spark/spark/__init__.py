"""Run Horovod-style training functions as Spark barrier tasks: ``horovod_spark.spark.run``, and
Databricks' ``HorovodRunner`` on top of it (with ``log_to_driver`` and the Keras ``LogCallback``).

The rooms: ``entry`` (``run``: a classic barrier job or a Spark Connect stage), ``run_options``
(every job's options, checked), ``driver/`` (the driver side every launch shares), ``task/`` (the
task and rank side every launch shares), ``barrier/`` (the classic barrier job), ``connect/``
(Spark Connect), ``elastic/`` (``run_elastic``), ``mpi/`` (MPI mode), ``notebook/``
(``HorovodRunner``), ``backend`` (the estimators' ``SparkBackend``). ``common/``, ``torch`` and
``keras`` are Horovod's import paths, which only re-export.

Names resolve lazily so that rank processes, which import ``horovod_spark.spark.task.rank_main``, do
not pay for importing pyspark. The exceptions are those of ``horovod_spark.exceptions``; this
package's ``RankFailedError`` is its ``SparkRankFailedError``.
"""
_EXPORTS = {
    "run": (".entry", "run"),
    "run_elastic": (".elastic.run", "run_elastic"),
    "HorovodRunner": (".notebook.horovod_runner", "HorovodRunner"),
    "log_to_driver": (".notebook.driver_log", "log_to_driver"),
    "LogCallback": (".notebook.log_callback", "LogCallback"),
    "HorovodSparkError": ("horovod_spark.exceptions", "HorovodSparkError"),
    "RankFailedError": ("horovod_spark.exceptions", "SparkRankFailedError"),
    "StartTimeoutError": ("horovod_spark.exceptions", "StartTimeoutError"),
    "get_available_devices": (".task.gpus", "get_available_devices"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    import importlib
    module, attr = _EXPORTS[name]
    value = getattr(importlib.import_module(module, __name__), attr)
    globals()[name] = value
    return value
