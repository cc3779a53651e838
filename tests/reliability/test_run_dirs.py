"""The directory a Spark task gives its rank (the pickled function in, the result out) is private
and gone after the run, whether fn returned, raised, or its task's Python worker was killed."""
import _thread
import glob
import os
import signal
import stat
import sys
import tempfile
import threading
import time

import cloudpickle
import pytest

import horovod_spark
from horovod_spark.spark import HorovodSparkError
from horovod_spark.spark.task import run_dir

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(180)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _describe_workdir():
    workdir = os.environ["HOROVOD_SPARK_WORKDIR"]
    files = {name: _mode(os.path.join(workdir, name)) for name in os.listdir(workdir)}
    return workdir, _mode(workdir), files


def _record_workdir_then(record: str, action: str):
    workdir = os.environ["HOROVOD_SPARK_WORKDIR"]
    with open(os.path.join(record, "rank%s" % os.environ["HOROVOD_RANK"]), "w") as f:
        f.write(workdir)
    if action == "raise":
        raise RuntimeError("fn failed on purpose")
    if action == "kill_task" and os.environ["HOROVOD_RANK"] == "1":
        os.kill(os.getppid(), signal.SIGKILL)  # the Spark task's Python worker, our parent
    if action == "sleep":
        time.sleep(600)
    return workdir


def _recorded(record) -> list:
    return [open(os.path.join(record, name)).read() for name in sorted(os.listdir(record))]


def test_run_directory_is_private_and_removed_after_success(spark):
    described = horovod_spark.run(_describe_workdir, num_proc=2, verbose=0)
    for workdir, mode, files in described:
        assert mode == 0o700
        # The function's pickle was read and removed before fn ran; what the rank writes is 0600.
        assert "call.pkl" not in files
        assert all(m == 0o600 for m in files.values()), files
        assert not os.path.exists(workdir)


def test_run_directory_is_removed_when_fn_raises(spark, tmp_path):
    with pytest.raises(HorovodSparkError):
        horovod_spark.run(_record_workdir_then, args=(str(tmp_path), "raise"), num_proc=2, verbose=0)
    workdirs = _recorded(tmp_path)
    assert len(workdirs) == 2
    # run() raises as soon as the driver has the rank's traceback; each task removes its
    # directory as it ends, which can be a moment later.
    assert _gone_within(workdirs, 10), workdirs


def test_run_directory_of_a_killed_task_is_removed_by_the_next_task(spark, tmp_path):
    with pytest.raises(HorovodSparkError):
        horovod_spark.run(_record_workdir_then, args=(str(tmp_path), "kill_task"), num_proc=2, verbose=0)
    workdirs = _recorded(tmp_path)
    assert len(workdirs) == 2
    # The killed task never reached its cleanup, but the rank had already removed the function's pickle.
    for workdir in workdirs:
        assert not os.path.exists(os.path.join(workdir, "call.pkl"))
    horovod_spark.run(os.getpid, num_proc=2, verbose=0)
    assert not any(os.path.exists(w) for w in workdirs), workdirs


def _gone_within(paths, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_run_directories_are_removed_when_run_is_interrupted(spark, tmp_path):
    spools_before = set(glob.glob(os.path.join(tempfile.gettempdir(), "horovod_spark-results-*")))

    def interrupt_once_both_ranks_run():
        deadline = time.monotonic() + 120
        while len(os.listdir(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        _thread.interrupt_main()  # what Ctrl-C in a notebook or terminal does

    threading.Thread(target=interrupt_once_both_ranks_run, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        horovod_spark.run(_record_workdir_then, args=(str(tmp_path), "sleep"), num_proc=2, verbose=0)
    workdirs = _recorded(tmp_path)
    assert len(workdirs) == 2
    # The tasks remove their directories once their ranks are killed, just after run() returns.
    assert _gone_within(workdirs, 15.0), workdirs
    spools_after = set(glob.glob(os.path.join(tempfile.gettempdir(), "horovod_spark-results-*")))
    assert spools_after <= spools_before


def test_sweep_leaves_directories_of_live_tasks(tmp_path):
    live = tmp_path / ("horovod_spark-abcdef12-0-p%d-x" % os.getpid())
    dead = tmp_path / "horovod_spark-abcdef12-1-p999999999-y"
    other = tmp_path / "horovod_spark-results-z"
    for path in (live, dead, other):
        path.mkdir()
    assert run_dir.sweep_stale(str(tmp_path)) == 1
    assert live.exists() and other.exists() and not dead.exists()
