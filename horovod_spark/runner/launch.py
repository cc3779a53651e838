"""``horovod_spark.launcher.cli.main`` under the name that ``horovod-spark-run`` console scripts
generated with the entry point ``horovod_spark.runner.launch:main`` import."""
from horovod_spark.launcher.cli import main

__all__ = ["main"]
