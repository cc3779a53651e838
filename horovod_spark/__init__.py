"""horovod_spark: the Horovod programming model on Apache Spark.

``horovod_spark.run(fn, num_proc=N)`` runs fn as N ranks in a Spark barrier stage;
``horovod_spark.run_elastic(fn, num_proc=N, min_num_proc=M)`` runs it as an elastic job of Spark tasks;
``horovod_spark.HorovodRunner(np=N).run(main, **kwargs)`` is Databricks' sparkdl HorovodRunner on it.
``horovod_spark.TorchDistributor(num_processes, local_mode, use_gpu).run(train_fn_or_script, *args)``
is pyspark's TorchDistributor on the same launch.
They are resolved lazily so that ``import horovod_spark.torch`` (and the core bindings) never import pyspark.
"""
# The one place the version is written: setup.py reads it from here for the wheel's metadata, and
# ``horovod-spark-run --version`` / ``--check-build`` print it.
__version__ = "0.1.0"

_LAZY = {
    "run": ("horovod_spark.spark.entry", "run"),
    "run_elastic": ("horovod_spark.spark.elastic.run", "run_elastic"),
    "HorovodRunner": ("horovod_spark.spark.notebook.horovod_runner", "HorovodRunner"),
    "TorchDistributor": ("horovod_spark.spark.distributor.torch_distributor", "TorchDistributor"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError("module 'horovod_spark' has no attribute %r" % name)
