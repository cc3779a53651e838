"""Run Horovod-style training functions as Spark barrier tasks: ``horovod_spark.spark.run``, and
Databricks' ``HorovodRunner`` on top of it (with ``log_to_driver`` and the Keras ``LogCallback``).

Names resolve lazily so that rank processes, which import ``horovod_spark.spark.rank_main``, do
not pay for importing pyspark. The exceptions are those of ``horovod_spark.exceptions``; this
package's ``RankFailedError`` is its ``SparkRankFailedError``.
"""
_EXPORTS = {
    "run": (".driver", "run"),
    "run_elastic": (".elastic_run", "run_elastic"),
    "HorovodRunner": (".horovod_runner", "HorovodRunner"),
    "log_to_driver": (".driver_log", "log_to_driver"),
    "LogCallback": (".log_callback", "LogCallback"),
    "HorovodSparkError": ("horovod_spark.exceptions", "HorovodSparkError"),
    "RankFailedError": ("horovod_spark.exceptions", "SparkRankFailedError"),
    "StartTimeoutError": ("horovod_spark.exceptions", "StartTimeoutError"),
    "get_available_devices": (".gpus", "get_available_devices"),
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
