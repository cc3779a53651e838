"""``horovod_spark.runner.local.run_local``: the function of ``horovod_spark.launcher.local_job``."""
from horovod_spark.launcher.local_job import LocalJob, run_local

__all__ = ["LocalJob", "run_local"]
