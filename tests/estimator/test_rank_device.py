"""Which device an estimator rank trains on: the choice from Spark's task GPUs, CUDA_VISIBLE_DEVICES
and the local rank (a pure function), and use_gpu=True on a machine without a GPU: a real fit that
trains on CPU and says so in one line."""
import contextlib
import io
import re

import numpy as np
import pytest

from horovod_spark.estimator.common.rank_device import NO_GPU_LINE
from horovod_spark.spark.task.gpus import choose_gpu

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(300)


# -- the choice -------------------------------------------------------------------------------------

@pytest.mark.parametrize("task_gpus, visible, local_rank, count, expected", [
    # horovod_spark.run's ranks: CUDA_VISIBLE_DEVICES is exactly the task's GPU, renumbered as 0.
    (["3"], ["3"], 1, 1, 0),
    # A task given GPUs 5 and 2 uses the first, wherever it sits among the visible ones.
    (["5", "2"], ["2", "5", "7"], 0, 3, 1),
    # Code running in the Spark task itself, every GPU visible: the address is the index.
    (["2"], None, 0, 4, 2),
    # No Spark GPU scheduling: round robin by local rank over what CUDA shows.
    ([], ["4", "6"], 3, 2, 1),
    ([], None, 5, 4, 1),
    # More ranks than GPUs on a host: they share (host staging works with any number per GPU).
    ([], None, 1, 1, 0),
    # No device at all: CPU, whatever Spark or the environment say.
    (["0"], ["0"], 0, 0, None),
    ([], None, 0, 0, None),
])
def test_choose_gpu(task_gpus, visible, local_rank, count, expected):
    assert choose_gpu(task_gpus, visible, local_rank, count) == expected


@pytest.mark.parametrize("task_gpus, visible, count, message", [
    (["1"], ["0"], 1, "Spark gave this task GPU 1, but CUDA_VISIBLE_DEVICES=0 hides it"),
    (["GPU-a1b2"], None, 2, "not a device number and CUDA_VISIBLE_DEVICES is unset"),
    (["3"], None, 2, r"GPU 3 \(CUDA device 3\), but this process sees only 2 CUDA device\(s\)"),
])
def test_choose_gpu_names_an_impossible_assignment(task_gpus, visible, count, message):
    with pytest.raises(ValueError, match=message):
        choose_gpu(task_gpus, visible, 0, count)


def test_rank_gpu_reads_spark_gpus_and_cuda_visible_devices(monkeypatch):
    from horovod_spark.spark.task.gpus import rank_gpu
    monkeypatch.setenv("HOROVOD_SPARK_GPUS", "6")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert rank_gpu(local_rank=0, device_count=2) == 1
    monkeypatch.delenv("HOROVOD_SPARK_GPUS")
    assert rank_gpu(local_rank=3, device_count=2) == 1
    assert rank_gpu(local_rank=3, device_count=0) is None


# -- use_gpu=True without a GPU: a real fit -------------------------------------------------------------

@pytest.fixture(scope="module")
def spark_master():
    return "local[2]"


def _regression_df(spark):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 3))
    y = x @ np.array([1.5, -2.0, 0.5]) + 0.3
    return spark.createDataFrame([([float(v) for v in row], float(t)) for row, t in zip(x, y)], ["x", "y"])


def test_use_gpu_without_a_gpu_trains_on_cpu_and_says_so_once(spark, tmp_path):
    from horovod_spark.estimator import TorchEstimator
    from horovod_spark.store import Store

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    est = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                         loss=torch.nn.functional.mse_loss, feature_cols=["x"], label_cols=["y"], batch_size=32,
                         epochs=3, use_gpu=True, verbose=0, store=Store.create(str(tmp_path / "store")))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        fitted = est.fit(_regression_df(spark))
    printed = out.getvalue() + err.getvalue()
    lines = [line for line in printed.splitlines() if "use_gpu=True" in line]
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus:
        assert lines == [], printed
    else:
        expected = NO_GPU_LINE % (2, 2, "torch.cuda.is_available() is False there")
        assert len(lines) == 1 and lines[0].endswith(expected), printed
    assert not re.search(r"\w+Warning: ", printed), printed
    history = fitted.getHistory()["loss"]
    assert len(history) == 3 and history[-1] < history[0]
    assert all(t.device.type == "cpu" for t in fitted.getModel().state_dict().values())


def _keras_rank_device():
    import io

    from horovod_spark.estimator import keras_remote
    from horovod_spark.estimator.common.rank_device import report_cpu_fallback
    without_gpu = keras_remote._configure_tensorflow(use_gpu=True)
    import horovod_spark.keras as hvd
    hvd.init()
    try:
        out = io.StringIO()
        missing = report_cpu_fallback(hvd, without_gpu, "TensorFlow lists no GPU there", out=out)
        return without_gpu, missing, out.getvalue()
    finally:
        hvd.shutdown()


def test_keras_ranks_without_a_gpu_are_counted_and_rank_0_says_so_once():
    pytest.importorskip("tensorflow")
    from horovod_spark.common import gpu_support
    from horovod_spark.launcher import run_local
    results = run_local(_keras_rank_device, num_proc=2, timeout=200)
    if gpu_support.gpu_available("tensorflow"):
        assert [r[:2] for r in results] == [(False, 0), (False, 0)]
        assert results[0][2] == ""
        return
    assert [r[:2] for r in results] == [(True, 2), (True, 2)]
    assert results[0][2] == NO_GPU_LINE % (2, 2, "TensorFlow lists no GPU there") + "\n"
    assert results[1][2] == ""
