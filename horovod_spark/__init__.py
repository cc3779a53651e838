"""horovod_spark: the Horovod programming model on Apache Spark.

``horovod_spark.run(fn, num_proc=N)`` runs fn as N ranks in a Spark barrier stage. It is resolved
lazily so that ``import horovod_spark.torch`` (and the core bindings) never import pyspark.
"""


def __getattr__(name):
    if name == "run":
        from horovod_spark.spark.driver import run
        globals()["run"] = run
        return run
    raise AttributeError("module 'horovod_spark' has no attribute %r" % name)
