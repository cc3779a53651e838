"""``horovod_spark.run`` on a session with Spark's console progress bar on, its ranks printing while
the barrier stage's bar is drawn: for test_console_progress_bar.py, which runs it on a terminal."""
import os
import sys
import time


def _rank_prints():
    import horovod_spark.torch as hvd
    hvd.init()
    # Past the bar's first delay (0.5 s) and several of its updates (every 0.2 s).
    for i in range(12):
        print("rank %d line %d" % (hvd.rank(), i), flush=True)
        time.sleep(0.25)
    rank = hvd.rank()
    hvd.shutdown()
    return rank


def main():
    from pyspark.sql import SparkSession

    import horovod_spark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("console_bar_job")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "true").getOrCreate())
    try:
        print("results %s" % horovod_spark.run(_rank_prints, num_proc=2), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
