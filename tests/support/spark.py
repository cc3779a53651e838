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


def stop_spark(session, conf=None) -> None:
    """Stop ``session`` and forget the settings it was given: Spark leaves them behind as the JVM's
    system properties (spark.driver.host, ...), where the next session of this process would pick
    them up (a driver address that no longer exists, say)."""
    from pyspark import SparkContext
    session.stop()
    jvm = SparkContext._jvm
    if jvm is not None:
        for key in conf or {}:
            jvm.java.lang.System.clearProperty(key)
