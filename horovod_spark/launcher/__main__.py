"""``python -m horovod_spark.launcher -np N command ...``: the same as ``horovod-spark-run``."""
import sys

from horovod_spark.launcher.cli import main

if __name__ == "__main__":
    sys.exit(main())
