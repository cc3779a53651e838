"""No warning the user did not cause: a small TorchEstimator and KerasEstimator fit + transform run
with FutureWarning, DeprecationWarning, UserWarning and RuntimeWarning turned into errors, in the
driver and, through PYTHONWARNINGS, in every process it starts (the JVM, Spark's Python workers,
the ranks). Only warnings that third-party code raises on its own are let through, each below with
the reason it is not ours. The fits run at verbose=0 with use_gpu left at its default (on a machine
without a GPU too): they print nothing of their own, only what Spark and TensorFlow print."""
import os
import re
import subprocess
import sys

import pytest

import horovod_spark

pytest.importorskip("pyspark")
pytest.importorskip("torch")
pytest.importorskip("keras")

pytestmark = pytest.mark.timeout(400)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warnings_job.py")

ERRORS = ["error::FutureWarning", "error::DeprecationWarning", "error::UserWarning", "error::RuntimeWarning"]

# Let through (later entries take precedence over ERRORS): action:message:category:module, the
# message a literal prefix without commas (PYTHONWARNINGS separates entries with them), the module
# the one the warning is raised from, exactly.
THIRD_PARTY = [
    # numpy 2 asks __array__ for a copy argument; TensorFlow's variables lack it, and Keras's own
    # convert_to_numpy (model.save, get_weights) calls np.array on them.
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning:"
    "keras.src.backend.tensorflow.core",
]


# What the JVM, Spark and TensorFlow's C++ logging print on their own (a rank's relayed with its prefix).
NOT_OURS = re.compile(r"^(\[\d+\]<std(?:out|err)>:)?("
                      r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?:WARN|INFO|ERROR) "   # Spark's log4j lines
                      r"|Using Spark's default log4j profile"
                      r"|Setting default log level to "
                      r"|To adjust logging level use sc.setLogLevel"
                      r"|WARNING: Using incubator modules"                        # the JVM
                      r"|WARNING: All log messages before absl::InitializeLog"    # TensorFlow (absl)
                      r"|[IW]\d{4} [\d:. ]+\d+ \S+:\d+\] )")


def test_estimators_raise_no_warning(tmp_path):
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONWARNINGS=",".join(ERRORS + THIRD_PARTY),
               PYTHONPATH=REPO_ROOT + (os.pathsep + path if path else ""),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, JOB, str(tmp_path / "store")], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=360)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-20000:]
    assert "torch transformed 160 rows" in done.stdout and "keras transformed 160 rows" in done.stdout, output
    # A warning raised where an error cannot propagate (a thread, __del__) is only printed.
    printed = re.findall(r"^.*(?:\w+Warning: |Exception ignored in).*$", output, re.M)
    assert not printed, "\n".join(printed)
    # verbose=0: nothing of ours but the job's own lines (the use_gpu notice included, as the job
    # left use_gpu at its default).
    ours = [line for line in output.splitlines()
            if line.strip() and not NOT_OURS.match(line) and not line.endswith(" transformed 160 rows")]
    assert not ours, "\n".join(ours)
