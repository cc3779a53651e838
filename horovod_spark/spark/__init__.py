"""Run Horovod-style training functions as Spark barrier tasks: ``horovod_spark.spark.run``.

Names resolve lazily so that rank processes, which import ``horovod_spark.spark.task_main``, do
not pay for importing pyspark.
"""
_EXPORTS = {
    "run": ("runner", "run"),
    "HorovodSparkError": ("errors", "HorovodSparkError"),
    "RankFailedError": ("errors", "RankFailedError"),
    "StartTimeoutError": ("errors", "StartTimeoutError"),
    "get_available_devices": ("gpus", "get_available_devices"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    import importlib
    module, attr = _EXPORTS[name]
    value = getattr(importlib.import_module("." + module, __name__), attr)
    globals()[name] = value
    return value
