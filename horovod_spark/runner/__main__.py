"""``python -m horovod_spark.runner -np N command ...``: the same as ``python -m horovod_spark.launcher``."""
import sys

from horovod_spark.launcher.cli import main

if __name__ == "__main__":
    sys.exit(main())
