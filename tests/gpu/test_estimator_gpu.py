"""TorchEstimator on a GPU: use_gpu=True trains there, with Spark GPU scheduling giving both tasks
the one GPU (spark.task.resource.gpu.amount=0.5, a discovery script), and prints no CPU fallback."""
import contextlib
import io
import json
import stat
import sys

import cloudpickle
import numpy as np
import pytest
from support.gpu import requires_cuda

pytestmark = [requires_cuda, pytest.mark.timeout(400)]
pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

# The functions and the model class below travel by value, as a notebook's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[1,2,2048]"


@pytest.fixture(scope="module")
def spark_conf(tmp_path_factory):
    script = tmp_path_factory.mktemp("gpu") / "discover_gpus.sh"
    script.write_text("#!/bin/sh\necho '%s'\n" % json.dumps({"name": "gpu", "addresses": ["0"]}))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"spark.worker.resource.gpu.amount": "1",
            "spark.worker.resource.gpu.discoveryScript": str(script),
            "spark.executor.resource.gpu.amount": "1",
            "spark.task.resource.gpu.amount": "0.5"}


def _where():
    import horovod_spark.torch as hvd
    from horovod_spark.spark import get_available_devices
    from horovod_spark.spark.task.gpus import rank_gpu
    hvd.init()
    try:
        return get_available_devices(), rank_gpu(hvd.local_rank(), torch.cuda.device_count())
    finally:
        hvd.shutdown()


def test_spark_gives_each_rank_the_gpu(spark):
    import horovod_spark
    assert horovod_spark.run(_where, num_proc=2) == [(["0"], 0), (["0"], 0)]


def test_use_gpu_trains_on_the_gpu(spark, tmp_path):
    from horovod_spark.estimator import TorchEstimator
    from horovod_spark.store import Store

    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 3))
    y = x @ np.array([1.5, -2.0, 0.5]) + 0.3
    df = spark.createDataFrame([([float(v) for v in row], float(t)) for row, t in zip(x, y)], ["x", "y"])

    class DeviceProbe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 1)

        def forward(self, inputs):
            if not inputs.is_cuda:
                raise RuntimeError("the batch is on %s, not on the GPU" % inputs.device)
            return self.fc(inputs)

    torch.manual_seed(0)
    model = DeviceProbe()
    est = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                         loss=torch.nn.functional.mse_loss, feature_cols=["x"], label_cols=["y"], batch_size=32,
                         epochs=3, use_gpu=True, verbose=0, store=Store.create(str(tmp_path / "store")))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        fitted = est.fit(df)
    assert "see no CUDA device" not in printed.getvalue(), printed.getvalue()
    history = fitted.getHistory()["loss"]
    assert history[-1] < history[0] / 2, history
