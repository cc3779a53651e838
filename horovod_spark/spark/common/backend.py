"""``horovod_spark.spark.common.backend``: Horovod's path to the estimators' backends
(``horovod.spark.common.backend``); the classes are ``horovod_spark.spark.backend``'s."""
from horovod_spark.spark.backend import Backend, SparkBackend, default_num_proc

__all__ = ["Backend", "SparkBackend", "default_num_proc"]
