"""horovod_spark.run on local-cluster[2,2,1024]: two real executor JVMs, so placement (local/cross
ranks) and Spark's GPU assignment are checked against where Spark really put each task.

The GPUs are declared by a discovery script (addresses "0" and "1" per worker): Spark schedules
and reports them exactly as real ones, which is all the runner sees; no CUDA is needed.
"""
import json
import os
import socket
import stat
import sys

import cloudpickle
import pytest

# The same training step as the local[4] tests, here spread over two executor JVMs.
from test_spark_run import _allreduce_and_optimizer_step, check_allreduce_and_step

import horovod_spark
from horovod_spark.spark import HorovodSparkError

pyspark = pytest.importorskip("pyspark")

pytestmark = pytest.mark.timeout(180)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))
WORKERS, CORES = 2, 2
NUM_PROC = WORKERS * CORES

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[%d,%d,1024]" % (WORKERS, CORES)


@pytest.fixture(scope="module")
def spark_conf(tmp_path_factory):
    script = tmp_path_factory.mktemp("gpu") / "discover_gpus.sh"
    script.write_text("#!/bin/sh\necho '%s'\n" % json.dumps({"name": "gpu", "addresses": ["0", "1"]}))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"spark.worker.resource.gpu.amount": "2",
            "spark.worker.resource.gpu.discoveryScript": str(script),
            "spark.executor.resource.gpu.amount": "2",
            "spark.task.resource.gpu.amount": "1"}


def _where():
    """Where this rank really runs: host, executor (its work dir is .../<app>/<executor id>),
    the GPU Spark gave its task, and what the runner told it."""
    from horovod_spark.spark import get_available_devices
    keys = ("HOROVOD_RANK", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
            "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME", "CUDA_VISIBLE_DEVICES")
    out = {k: os.environ.get(k) for k in keys}
    out.update(host=socket.gethostname(), executor=os.path.basename(os.getcwd()),
               devices=get_available_devices())
    return out


def _expected(keys):
    """Horovod's topology from each rank's group key: local = same key, ordered by rank; cross =
    same local_rank across keys, keys ordered by their lowest rank."""
    order = list(dict.fromkeys(keys))
    local = [[r for r, k in enumerate(keys) if k == key] for key in keys]
    out = []
    for rank, key in enumerate(keys):
        lr = local[rank].index(rank)
        peers = [k for k in order if sum(1 for x in keys if x == k) > lr]
        out.append((lr, len(local[rank]), peers.index(key), len(peers)))
    return out


def _topology(info):
    return [(int(i["HOROVOD_LOCAL_RANK"]), int(i["HOROVOD_LOCAL_SIZE"]), int(i["HOROVOD_CROSS_RANK"]),
             int(i["HOROVOD_CROSS_SIZE"])) for i in info]


def test_placement_by_host_across_two_executors(spark):
    info = horovod_spark.run(_where, num_proc=NUM_PROC, verbose=0)
    assert [int(i["HOROVOD_RANK"]) for i in info] == list(range(NUM_PROC))
    executors = {i["executor"] for i in info}
    assert len(executors) == WORKERS, "expected both executor JVMs to run ranks: %s" % info
    # Both executors are on this machine: one host, so all ranks are local to each other.
    assert _topology(info) == _expected([i["host"] for i in info])
    assert all(i["HOROVOD_HOSTNAME"] == i["host"] for i in info)
    assert _topology(info)[0][1] == NUM_PROC


def test_placement_by_executor(spark, monkeypatch):
    monkeypatch.setenv("HOROVOD_SPARK_HOST_KEY", "executor")
    info = horovod_spark.run(_where, num_proc=NUM_PROC, verbose=0)
    keys = [i["executor"] for i in info]
    assert len(set(keys)) == WORKERS
    topo = _topology(info)
    assert topo == _expected(keys)
    assert {t[3] for t in topo} == {WORKERS} and {t[1] for t in topo} == {CORES}
    # Ranks on one executor share HOROVOD_HOSTNAME (so the core uses shared memory between them);
    # ranks on different executors do not.
    by_exec = {}
    for i in info:
        by_exec.setdefault(i["executor"], set()).add(i["HOROVOD_HOSTNAME"])
    assert all(len(v) == 1 for v in by_exec.values())
    assert len(set().union(*by_exec.values())) == WORKERS


def test_gpu_assigned_by_spark_becomes_cuda_visible_devices(spark):
    info = horovod_spark.run(_where, num_proc=NUM_PROC, verbose=0)
    for i in info:
        assert i["CUDA_VISIBLE_DEVICES"] in ("0", "1")
        assert i["devices"] == [i["CUDA_VISIBLE_DEVICES"]]
    # Two tasks on one executor never share a GPU.
    per_exec = {}
    for i in info:
        per_exec.setdefault(i["executor"], []).append(i["CUDA_VISIBLE_DEVICES"])
    assert all(sorted(v) == ["0", "1"] for v in per_exec.values()), per_exec


def test_allreduce_across_executors(spark, monkeypatch):
    # One "host" per executor: ranks on the same executor use shared memory, the two executors
    # talk over TCP, so both transports and the cross-host path of the core are exercised.
    monkeypatch.setenv("HOROVOD_SPARK_HOST_KEY", "executor")
    results = horovod_spark.run(_allreduce_and_optimizer_step, num_proc=NUM_PROC, verbose=0)
    check_allreduce_and_step(results, NUM_PROC)
    assert sorted((r["local_rank"], r["local_size"]) for r in results) == [(0, 2), (0, 2), (1, 2), (1, 2)]


def _kill_my_task(pid_dir):
    import signal
    import time
    rank = int(os.environ["HOROVOD_RANK"])
    with open(os.path.join(pid_dir, "%d.pid" % rank), "w") as f:
        f.write(str(os.getpid()))
    if rank == 1:
        time.sleep(0.5)
        os.kill(os.getppid(), signal.SIGKILL)  # the Spark task's Python worker dies: no report
        time.sleep(60)  # we die with it (parent-death signal)
    time.sleep(120)


def test_spark_task_crash_is_not_retried_for_minutes(spark, tmp_path):
    """A task lost outside fn: Spark (task.maxFailures=4 here) would retry the barrier stage."""
    import time

    from test_spark_run import _alive
    start = time.monotonic()
    with pytest.raises(HorovodSparkError) as info:
        horovod_spark.run(_kill_my_task, args=(str(tmp_path),), num_proc=NUM_PROC, verbose=0)
    assert time.monotonic() - start < 20
    text = str(info.value)
    assert "rank 1" in text or "outside fn" in text, text
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(pids) == NUM_PROC and [p for p in pids if _alive(p)] == []
    tracker = spark.sparkContext.statusTracker()
    assert not tracker.getActiveJobsIds()


def test_slots_counted_from_executors(spark):
    with pytest.raises(HorovodSparkError, match="has %d" % NUM_PROC):
        horovod_spark.run(_where, num_proc=NUM_PROC + 1, verbose=0)
