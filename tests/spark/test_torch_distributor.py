"""horovod_spark.TorchDistributor, pyspark's TorchDistributor on our launch: a real DDP function and a
real DDP script (gloo), on the driver (local_mode=True) and as Spark barrier tasks on local[2]
(local_mode=False). DDP's result must equal one process training on every rank's rows; rank 0's
result comes back on every run; a failing rank raises with its traceback; bad input fails at once."""
import json
import os
import sys

import cloudpickle
import pytest
from support import ddp_training

import horovod_spark
from horovod_spark.exceptions import RankFailedError

pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(300)

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(ddp_training)  # Spark's executors do not have tests/ on their path
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(ddp_training.__file__)), "ddp_script.py")


def _rank_and_env():
    import torch.distributed as dist
    dist.init_process_group("gloo")
    try:
        names = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
        dist.barrier()  # rank 0 hosts the store: it leaves only once every rank is connected
        return dist.get_rank(), {name: os.environ[name] for name in names}
    finally:
        dist.destroy_process_group()


def _fail_on_rank_1():
    import torch.distributed as dist
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("rank one cannot go on")
    dist.barrier()  # cut short when rank 1 fails


def _assert_trained_like_one_process(results, world_size):
    expected = ddp_training.reference_weights(world_size)
    for rank, result in enumerate(results):
        assert result["rank"] == rank and result["world_size"] == world_size
        for got, want in zip(result["weights"], expected):
            assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("local_mode", [True, False], ids=["local_mode", "spark_tasks"])
def test_a_ddp_function_trains_as_one_process_on_all_rows(spark, local_mode):
    distributor = horovod_spark.TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False)
    results = distributor.run_all_ranks(ddp_training.train, 5, lr=0.05)
    _assert_trained_like_one_process(results, 2)
    # torchrun's view: one host of two processes on the driver; one process per Spark task.
    assert [r["local_rank"] for r in results] == ([0, 1] if local_mode else [0, 0])
    assert {r["local_world_size"] for r in results} == ({2} if local_mode else {1})


@pytest.mark.parametrize("local_mode,runs", [(True, 3), (False, 1)], ids=["local_mode", "spark_tasks"])
def test_run_returns_rank_zeros_result_every_time(spark, local_mode, runs):
    # pyspark's own, in local mode, returns whichever rank wrote its output file last, or None.
    distributor = horovod_spark.TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False)
    for _ in range(runs):
        rank, env = distributor.run(_rank_and_env)
        assert rank == 0 and env["RANK"] == "0" and env["WORLD_SIZE"] == "2"
        assert int(env["MASTER_PORT"]) > 0


@pytest.mark.parametrize("local_mode", [True, False], ids=["local_mode", "spark_tasks"])
def test_a_ddp_script_runs_as_torchrun_runs_it(spark, local_mode, tmp_path):
    distributor = horovod_spark.TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False)
    assert distributor.run(SCRIPT, "--steps", 5, "--lr=0.05", "--out", str(tmp_path)) is None
    results = [json.load(open(tmp_path / ("rank%d.json" % rank))) for rank in range(2)]
    _assert_trained_like_one_process(results, 2)


def test_a_failing_script_fails_the_run_with_its_exit(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(RankFailedError, match="exited with 3"):
        horovod_spark.TorchDistributor(num_processes=2, use_gpu=False).run(str(script))


@pytest.mark.parametrize("local_mode", [True, False], ids=["local_mode", "spark_tasks"])
def test_a_failing_rank_raises_with_its_traceback(spark, local_mode):
    distributor = horovod_spark.TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False)
    with pytest.raises(RankFailedError) as info:
        distributor.run(_fail_on_rank_1)
    text = str(info.value)
    assert "rank one cannot go on" in text and "_fail_on_rank_1" in text


def test_missing_slots_fail_before_any_rank_starts(spark):
    with pytest.raises(Exception, match="slot"):
        horovod_spark.TorchDistributor(num_processes=3, local_mode=False, use_gpu=False).run(_rank_and_env)


def test_bad_arguments_fail_at_once_naming_the_fix(spark, tmp_path):
    with pytest.raises(ValueError, match="num_processes"):
        horovod_spark.TorchDistributor(num_processes=0)
    with pytest.raises(TypeError, match="local_mode"):
        horovod_spark.TorchDistributor(local_mode="yes")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="use_gpu=False"):
            horovod_spark.TorchDistributor(num_processes=2, local_mode=True, use_gpu=True)
        with pytest.raises(RuntimeError, match="spark.task.resource.gpu.amount"):
            horovod_spark.TorchDistributor(num_processes=2, local_mode=False, use_gpu=True)
    distributor = horovod_spark.TorchDistributor(num_processes=2, use_gpu=False)
    with pytest.raises(ValueError, match="command-line arguments"):
        distributor.run(SCRIPT, steps=5)
    with pytest.raises(FileNotFoundError, match="no training script"):
        distributor.run(str(tmp_path / "missing.py"))
    with pytest.raises(TypeError, match="training function"):
        distributor.run(42)
