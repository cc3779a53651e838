"""LightningEstimator fit -> transform on local-cluster[2,2,1024]: two executor JVMs, so the ranks,
the prepared data and transform() run in separate executor processes from the driver."""
import sys

import cloudpickle
import numpy as np
import pytest

pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from support import lightning_estimator_models as models  # noqa: E402

from horovod_spark.spark.lightning import TorchEstimator  # noqa: E402  (Horovod's path, as a ported script has it)
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(600)

WORKERS, CORES = 2, 2

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(models)


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[%d,%d,1024]" % (WORKERS, CORES)


@pytest.fixture(scope="module")
def spark_conf():
    # One task slot per executor: two ranks then must run in two different JVMs.
    return {"spark.task.cpus": str(CORES)}


class RecordExecutor(pl.Callback):
    """Writes which executor (its work directory's name) each rank trained in."""

    def __init__(self, directory):
        self.directory = directory

    def on_train_start(self, trainer, pl_module):
        import os
        with open(os.path.join(self.directory, "rank-%d" % trainer.global_rank), "w") as f:
            f.write(os.path.basename(os.getcwd()))


def test_fit_and_transform_across_two_executors(spark, tmp_path, capsys):
    df = models.data_frame(spark, 600, 0, partitions=4)
    torch.manual_seed(0)
    est = TorchEstimator(num_proc=WORKERS, model=models.Classifier(), feature_cols=["features"], label_cols=["label"],
                         validation=0.2, batch_size=16, epochs=3, random_seed=0,
                         store=Store.create(str(tmp_path / "store")), callbacks=[RecordExecutor(str(tmp_path))],
                         logger=pl.loggers.CSVLogger("logs"))
    model = est.fit(df)
    out = capsys.readouterr().out
    assert "on 2 rank(s)" in out and "epoch 3/3 - " in out, out
    executors = {(tmp_path / ("rank-%d" % r)).read_text() for r in range(WORKERS)}
    assert len(executors) == WORKERS, executors
    history = model.getHistory()
    assert len(history["val_acc"]) == 3 and history["val_acc"][-1] > 0.85, history
    assert models.held_out_accuracy(model.getModel()) > 0.85

    rows = model.transform(df).orderBy("id").select("features", "label__output").collect()
    with torch.no_grad():
        expected = model.getModel()(torch.tensor(np.array([r["features"].toArray() for r in rows]),
                                                 dtype=torch.float32))
    np.testing.assert_allclose(np.array([r["label__output"] for r in rows]), expected.numpy(), rtol=1e-5, atol=1e-6)
