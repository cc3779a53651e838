"""Starting a SparkSession for the tests: the settings every test session shares."""
import os
import sys


def start_spark(master: str, app_name: str, conf=None, log_level: str = "FATAL"):
    """A SparkSession on ``master`` whose Python workers run this interpreter and import this
    checkout's horovod_spark (the executors of a local-cluster do not inherit the driver's sys.path)."""
    from pyspark.sql import SparkSession

    import horovod_spark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.executorEnv.PYTHONPATH", repo_root)
               .config("spark.executorEnv.TF_CPP_MIN_LOG_LEVEL", "2"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session
