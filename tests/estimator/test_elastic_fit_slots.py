"""Elastic estimator fits on local[2,3] (two task slots, three attempts per task): a fit of
num_proc=4 with min_num_proc=2 starts on the two free slots instead of being refused for want of
four (the other two tasks would join as slots came free), and a rank whose training raises once is
a lost rank: the survivor rolls back to the start of the epoch, Spark runs the failed task again,
and every epoch completes."""
import os
import sys

import cloudpickle
import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

from pyspark.ml.linalg import Vectors  # noqa: E402
from support.injected_failures import RaiseAtStep  # noqa: E402

from horovod_spark.estimator import TorchEstimator  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = [pytest.mark.timeout(600), pytest.mark.legacy_stack]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EPOCHS = 3


@pytest.fixture(scope="module")
def spark_master():
    return "local[2,3]"


@pytest.fixture(scope="module")
def train_df(spark):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 4))
    labels = (x[:, 0] - x[:, 1] > 0).astype(int)
    return spark.createDataFrame([(Vectors.dense(row.tolist()), int(label)) for row, label in zip(x, labels)],
                                 ["features", "label"]).repartition(2).cache()


def _estimator(store, run_id, num_proc, callbacks=(), **params):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return TorchEstimator(num_proc=num_proc, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                          loss=torch.nn.functional.cross_entropy, feature_cols=["features"], label_cols=["label"],
                          batch_size=16, epochs=EPOCHS, random_seed=0, store=store, run_id=run_id,
                          callbacks=list(callbacks), elastic=True, verbose=1, **params)


def test_an_elastic_fit_starts_on_min_num_proc_free_slots(spark, train_df, tmp_path, capsys):
    store = Store.create(str(tmp_path / "store"))
    model = _estimator(store, "small-cluster", 4, min_num_proc=2).fit(train_df)
    out, err = capsys.readouterr()
    sys.stdout.write(out)
    sys.stderr.write(err)
    history = model.getHistory()
    assert len(history["loss"]) == EPOCHS and history["num_ranks"] == [2] * EPOCHS, history
    assert "starting with 2 of 4 rank(s) (min_num_proc=2)" in out + err, (out, err)


def test_an_elastic_fit_survives_a_rank_that_raises_once(spark, train_df, tmp_path, capsys):
    store = Store.create(str(tmp_path / "store"))
    marker = str(tmp_path / "raised")
    model = _estimator(store, "raises-once", 2, [RaiseAtStep(marker, rank=1, epoch=1, step=3)]).fit(train_df)
    out, err = capsys.readouterr()
    sys.stdout.write(out)
    sys.stderr.write(err)
    assert os.path.exists(marker), "the callback never raised"
    history = model.getHistory()
    assert len(history["loss"]) == EPOCHS, history
    assert "lost worker 1 (rank 1) raised ValueError: an injected failure on rank 1 at epoch 1, step 3" in err, err
