"""``python -m horovod_spark.runner -np N command ...``: the same as ``horovod-spark-run``."""
import sys

from horovod_spark.runner.launch import main

if __name__ == "__main__":
    sys.exit(main())
