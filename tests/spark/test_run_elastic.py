"""horovod_spark.run_elastic on local-cluster[3,1,1024]: three executor JVMs, one rank each. The
JVM of one rank's executor is SIGKILLed during training; the survivors roll back to their last
commit, re-form the job and finish with the model an undisturbed run computes; when Spark reruns
the lost task on a new executor, the job grows back to three ranks."""
import os
import sys
import threading
import time

import cloudpickle
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("torch")

from support import elastic_training  # noqa: E402
from support.executor_kill import write_executor_pid  # noqa: E402

import horovod_spark  # noqa: E402

pytestmark = pytest.mark.timeout(400)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[3,1,1024]"


def _train_and_mark(victim_worker, pid_file, started_file, commit_delay, grow_to):
    from horovod_spark.common import config
    if config.ELASTIC_WORKER.get() == victim_worker:
        write_executor_pid(pid_file)
    return elastic_training.train(-1, "none", 0, commit_delay, started_file, grow_to=grow_to)


def _run_killing_an_executor(tmp_path, commit_delay, grow_to=None):
    """run_elastic of 3 ranks; once training is under way (rank 0 marks step 4) the executor JVM of
    worker 2 is SIGKILLed. Returns the results and the wall time of the kill."""
    pid_file, started_file = str(tmp_path / "victim_jvm"), str(tmp_path / "started")
    killed = {}

    def killer():
        deadline = time.monotonic() + 200
        while not (os.path.exists(pid_file) and os.path.exists(started_file)) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(open(pid_file).read())
        killed["at"] = time.time()
        os.kill(pid, 9)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    results = horovod_spark.run_elastic(_train_and_mark, args=(2, pid_file, started_file, commit_delay, grow_to),
                                        num_proc=3, min_num_proc=2, elastic_timeout=120, start_timeout=120)
    thread.join(5)
    assert "at" in killed
    return results, killed["at"]


def test_run_elastic_survives_an_executor_jvm_killed_by_pid(spark, tmp_path):
    reference = elastic_training.reference_weights()
    results, killed_at = _run_killing_an_executor(tmp_path, 0.3)
    assert len(results) >= 2, results
    recovery = max(r["resumed_at"] for r in results if r["resumed_at"]) - killed_at
    print("run_elastic: %d rank(s) finished; from the executor kill to the first step after the reset: %.1f s"
          % (len(results), recovery))
    assert recovery < 30, recovery  # the goal
    for rank, result in enumerate(results):
        assert result["rank"] == rank and result["steps"] == elastic_training.STEPS, result
        elastic_training.check_weights(result, reference)
    assert all(r["resets"] >= 1 for r in results if r["worker"] < 2), results


def test_run_elastic_grows_back_when_spark_reschedules_the_lost_task(spark, tmp_path):
    # Spark starts a new executor and reruns the lost task there; its attempt joins as worker 3 at
    # a commit, and the job ends with 3 ranks again (the ranks keep committing after the last step
    # until it has joined, however long the cluster takes).
    reference = elastic_training.reference_weights()
    results, _ = _run_killing_an_executor(tmp_path, 0.5, grow_to=3)
    assert [r["size"] for r in results] == [3, 3, 3], results
    assert sorted(r["worker"] for r in results) == [0, 1, 3], results
    for rank, result in enumerate(results):
        assert result["rank"] == rank and result["steps"] == elastic_training.STEPS, result
        elastic_training.check_weights(result, reference)
    # The survivors went on with 2 ranks until the new attempt joined, unless it registered before
    # the driver declared the loss: then it joined in that same generation (see the next test).
    survivor = results[0]
    assert survivor["resets"] >= 1 and survivor["sizes"][-1] == 3, survivor


def test_a_replacement_that_registers_before_the_loss_is_declared_joins(spark, tmp_path, monkeypatch):
    # With a 20 s heartbeat timeout, the task Spark reruns on a new executor registers while the
    # driver still counts the lost worker as running, so the job is full when it arrives: it waits
    # on standby and joins in the generation that drops the lost worker.
    monkeypatch.setenv("HOROVOD_SPARK_ELASTIC_HEARTBEAT_TIMEOUT_SECONDS", "20")
    results, _ = _run_killing_an_executor(tmp_path, 0.5, grow_to=3)
    assert [r["size"] for r in results] == [3, 3, 3], results
    assert sorted(r["worker"] for r in results) == [0, 1, 3], results
    assert all(r["steps"] == elastic_training.STEPS for r in results), results
