"""Every process a rank starts ends with the rank, however it detached: a plain child, one started
with setsid, one with Popen(start_new_session=True) and a double-fork daemon, on run() (local[2]),
run_local and the horovod-spark-run CLI."""
import os
import subprocess
import sys

import cloudpickle
import pytest
from support import detached_children

import horovod_spark
from horovod_spark.launcher.local_job import run_local

pytestmark = pytest.mark.timeout(120)
cloudpickle.register_pickle_by_value(sys.modules["support.detached_children"])
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pids(directory) -> list:
    return [int(p.read_text()) for p in sorted(directory.glob("*.pid"))]


def _check_none_left(pids):
    try:
        assert len(pids) == 8  # 4 children per rank, 2 ranks
        assert detached_children.alive(pids) == []
    finally:
        detached_children.kill(pids)


def test_run_leaves_no_detached_child(spark, tmp_path):
    horovod_spark.run(detached_children.start_detached_children, args=(str(tmp_path),), num_proc=2, verbose=0)
    _check_none_left(_pids(tmp_path))


def test_run_local_leaves_no_detached_child(tmp_path):
    run_local(detached_children.start_detached_children, args=(str(tmp_path),), num_proc=2)
    _check_none_left(_pids(tmp_path))


def test_cli_leaves_no_detached_child(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(detached_children.CLI_SCRIPT % TESTS_DIR)
    env = dict(os.environ)
    repo = os.path.dirname(TESTS_DIR)
    env["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-m", "horovod_spark.launcher", "-np", "2", sys.executable, str(script),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    _check_none_left(_pids(tmp_path))
