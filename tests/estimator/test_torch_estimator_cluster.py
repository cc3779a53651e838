"""TorchEstimator fit -> transform on local-cluster[2,2,1024]: two executor JVMs, so the ranks, the
prepared data and transform() run in separate executor processes from the driver."""
import os
import sys

import cloudpickle
import numpy as np
import pytest

import horovod_spark

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

from pyspark.ml.linalg import Vectors  # noqa: E402

from horovod_spark.estimator import TorchEstimator, TorchModel  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(300)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))
WORKERS, CORES = 2, 2

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[%d,%d,1024]" % (WORKERS, CORES)


@pytest.fixture(scope="module")
def spark_conf():
    # One task slot per executor: two ranks then must run in two different JVMs.
    return {"spark.task.cpus": str(CORES)}


def _executor_pids(df):
    return set(df.rdd.mapPartitions(lambda _: [os.getppid()]).collect())


class RecordExecutor:
    """Writes which executor (its work directory's name) each rank trained in."""

    def __init__(self, directory):
        self.directory = directory

    def on_train_begin(self, rank, size):
        with open(os.path.join(self.directory, "rank-%d" % rank), "w") as f:
            f.write(os.path.basename(os.getcwd()))


def test_fit_and_transform_across_two_executors(spark, tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(800, 6))
    labels = (x[:, 0] + 0.5 * x[:, 1] - x[:, 2] > 0).astype(int)
    df = spark.createDataFrame([(i, Vectors.dense(row.tolist()), int(label))
                                for i, (row, label) in enumerate(zip(x, labels))],
                               ["id", "features", "label"]).repartition(4)

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    est = TorchEstimator(num_proc=WORKERS, model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.02),
                         loss=torch.nn.functional.cross_entropy, metrics=["accuracy"], feature_cols=["features"],
                         label_cols=["label"], validation=0.2, batch_size=32, epochs=4, random_seed=0,
                         store=Store.create(str(tmp_path / "store")), callbacks=[RecordExecutor(str(tmp_path))])
    model = est.fit(df)
    out = capsys.readouterr().out
    assert "on 2 rank(s)" in out and "epoch 4/4 - loss: " in out
    executors = {(tmp_path / ("rank-%d" % r)).read_text() for r in range(WORKERS)}
    assert len(executors) == WORKERS, executors
    history = model.getHistory()
    assert len(history["val_accuracy"]) == 4 and history["val_accuracy"][-1] > 0.9, history

    pred = model.transform(df)
    assert len(_executor_pids(pred)) == WORKERS  # transform ran in both executors
    rows = pred.orderBy("id").select("label__output", "label").collect()
    accuracy = np.mean([np.argmax(r["label__output"]) == r["label"] for r in rows])
    assert accuracy > 0.9

    path = str(tmp_path / "model")
    model.write().overwrite().save(path)
    loaded = TorchModel.load(path)
    again = loaded.transform(df).orderBy("id").select("label__output").collect()
    np.testing.assert_array_equal(np.array([r[0] for r in again]),
                                  np.array([r["label__output"] for r in rows]))
