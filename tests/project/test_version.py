"""One version string: ``horovod_spark.__version__`` is what setup.py puts in the package metadata
and what ``horovod-spark-run --version`` prints (tests/packaging checks the built wheels too)."""
import os
import subprocess
import sys

from support import REPO_ROOT

import horovod_spark


def test_setup_py_takes_the_version_from_the_package():
    done = subprocess.run([sys.executable, "setup.py", "--version"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == horovod_spark.__version__
    with open(os.path.join(REPO_ROOT, "setup.py")) as f:
        assert horovod_spark.__version__ not in f.read(), "setup.py spells the version itself"


def test_the_launcher_prints_the_same_version():
    done = subprocess.run([sys.executable, "-m", "horovod_spark.launcher", "--version"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "horovod-spark-run " + horovod_spark.__version__
