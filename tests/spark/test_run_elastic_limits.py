"""horovod_spark.run_elastic's limits and output on local-cluster[3,1,1024]: killing an executor
JVM below ``min_num_proc`` or past ``reset_limit`` ends the job quickly with an error naming the
lost worker; the ranks' stdout/stderr reach the driver as run()'s do; a bad heartbeat timeout is
refused before any task starts.

Spark would rerun a lost task on the executor the cluster starts in place of the killed one, and
that attempt would join the job and bring it back to ``min_num_proc``; the min_num_proc test holds
such executors stopped (``NoReplacements``), as a cluster that lost a node for good would never
start them, so the limit is what ends the job, every time."""
import io
import sys
import time

import cloudpickle
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("torch")

from support import elastic_training  # noqa: E402
from support.executor_kill import NoReplacements, kill_when_ready, write_executor_pid  # noqa: E402

import horovod_spark  # noqa: E402
from horovod_spark.common import config  # noqa: E402
from horovod_spark.exceptions import ConfigError, ElasticJobError  # noqa: E402

# Generous: on a loaded 2-core machine the cluster alone has taken 270 s to start.
pytestmark = pytest.mark.timeout(600)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

_HEARTBEAT = config.SPARK_ELASTIC_HEARTBEAT_TIMEOUT.name


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[3,1,1024]"


def _train_until_killed(victim_worker, pid_file, started_file):
    if config.ELASTIC_WORKER.get() == victim_worker:
        write_executor_pid(pid_file)
    return elastic_training.train(-1, "none", 0, 0.3, started_file)


def _kill_worker_2_executor(spark, tmp_path, no_replacements=False, **limits):
    """run_elastic of 3 ranks whose worker 2's executor JVM is SIGKILLed at step 4; returns the
    ElasticJobError's text and the seconds from the kill to it."""
    pid_file, started_file = str(tmp_path / "victim_jvm"), str(tmp_path / "started")
    guard = NoReplacements(spark.sparkContext.getConf().get("spark.driver.port")) if no_replacements else None
    killed = kill_when_ready(pid_file, started_file, no_replacements=guard)
    try:
        with pytest.raises(ElasticJobError) as info:
            horovod_spark.run_elastic(_train_until_killed, args=(2, pid_file, started_file), num_proc=3,
                                      start_timeout=120, **limits)
    finally:
        if guard is not None:
            guard.__exit__(None, None, None)
    assert "at" in killed, "the job ended before the executor was killed: %s" % info.value
    return str(info.value), time.time() - killed["at"]


def _talk():
    import sys

    from horovod_spark.common import config
    worker = config.ELASTIC_WORKER.get()
    print("out line of worker %d" % worker)
    print("err line of worker %d" % worker, file=sys.stderr)
    sys.stdout.write("no newline at exit from worker %d" % worker)
    return worker


def test_the_ranks_output_reaches_the_driver(spark):
    out, err = io.StringIO(), io.StringIO()
    assert horovod_spark.run_elastic(_talk, num_proc=3, stdout=out, stderr=err, start_timeout=120) == [0, 1, 2]
    out_lines, err_lines = out.getvalue().splitlines(), err.getvalue().splitlines()
    for worker in range(3):
        assert "[%d]<stdout>:out line of worker %d" % (worker, worker) in out_lines, out_lines
        assert "[%d]<stdout>:no newline at exit from worker %d" % (worker, worker) in out_lines, out_lines
        assert "[%d]<stderr>:err line of worker %d" % (worker, worker) in err_lines, err_lines


def test_timestamps_prefix_the_ranks_output_when_asked(spark):
    out = io.StringIO()
    horovod_spark.run_elastic(_talk, num_proc=1, stdout=out, stderr=io.StringIO(), start_timeout=120,
                              prefix_output_with_timestamp=True)
    line = next(x for x in out.getvalue().splitlines() if x.endswith("out line of worker 0"))
    assert time.strftime("%Y-%m-%d") in line and line.index("[0]<stdout>:") > 0, line


@pytest.mark.parametrize("value", ["0.5", "soon"])
def test_a_bad_heartbeat_timeout_is_refused_before_any_task_starts(spark, monkeypatch, value):
    monkeypatch.setenv(_HEARTBEAT, value)
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as info:
        horovod_spark.run_elastic(_talk, num_proc=3)
    assert time.monotonic() - t0 < 1.0
    assert _HEARTBEAT in str(info.value) and repr(value) in str(info.value), info.value


def test_a_loss_past_reset_limit_ends_the_job_naming_it(spark, tmp_path, monkeypatch):
    monkeypatch.setenv(_HEARTBEAT, "1.5")
    text, after = _kill_worker_2_executor(spark, tmp_path, min_num_proc=2, reset_limit=0, elastic_timeout=60)
    print("reset_limit: %.1f s from the kill to the error: %s" % (after, text))
    assert "reset_limit=0" in text and "worker 2 (rank 2) was silent for" in text, text
    assert after < 30, after  # the heartbeat timeout and the job's clean-up, not elastic_timeout=60


def test_losing_an_executor_below_min_num_proc_ends_the_job_naming_it(spark, tmp_path, monkeypatch):
    monkeypatch.setenv(_HEARTBEAT, "1.5")  # the driver's, read when run_elastic starts
    text, after = _kill_worker_2_executor(spark, tmp_path, no_replacements=True, min_num_proc=3, elastic_timeout=3)
    print("min_num_proc: %.1f s from the kill to the error: %s" % (after, text))
    assert "worker 2 (rank 2) was silent for" in text and "min_num_proc=3" in text, text
    assert "elastic_timeout=3" in text, text
    assert after < 30, after  # the heartbeat timeout and elastic_timeout, then the job's clean-up
