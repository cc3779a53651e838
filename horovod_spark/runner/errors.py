"""``horovod_spark.runner.errors.RankFailedError``: the class of ``horovod_spark.exceptions``."""
from horovod_spark.exceptions import RankFailedError

__all__ = ["RankFailedError"]
