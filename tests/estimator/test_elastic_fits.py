"""Elastic estimator fits (``elastic=True``) on local-cluster[3,1,1024]: three executor JVMs, one
rank each. During an epoch, the rank 2's executor JVM is SIGKILLed (by the rank itself, from a
callback, so the kill follows training progress): the fit goes on with the survivors from the
start of the interrupted epoch, finishes every epoch, and returns a model as accurate on
held-out rows as an undisturbed fit's."""
import os
import posixpath
import sys

import cloudpickle
import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

from pyspark.ml.linalg import Vectors  # noqa: E402
from support.executor_kill import KillExecutorAtStep  # noqa: E402

from horovod_spark.estimator import TorchEstimator  # noqa: E402
from horovod_spark.exceptions import ElasticJobError  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(400)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EPOCHS = 5


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[3,1,1024]"


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6))
    labels = (x[:, 0] + 0.5 * x[:, 1] - x[:, 2] > 0).astype(int)
    return x, labels


@pytest.fixture(scope="module")
def train_df(spark):
    x, labels = _data(1200, 0)
    return spark.createDataFrame([(Vectors.dense(row.tolist()), int(label)) for row, label in zip(x, labels)],
                                 ["features", "label"]).repartition(3).cache()


def _held_out_accuracy(model):
    x, labels = _data(2000, 1)
    net = model.getModel()
    with torch.no_grad():
        predicted = net(torch.tensor(x, dtype=torch.float32)).argmax(dim=1).numpy()
    return float(np.mean(predicted == labels))


def _torch_estimator(store, run_id, callbacks=(), **params):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    return TorchEstimator(num_proc=3, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                          loss=torch.nn.functional.cross_entropy, metrics=["accuracy"], feature_cols=["features"],
                          label_cols=["label"], validation=0.2, batch_size=16, epochs=EPOCHS, random_seed=0,
                          store=store, run_id=run_id, callbacks=list(callbacks), elastic=True, **params)


def test_torch_fit_survives_an_executor_killed_mid_epoch(spark, train_df, tmp_path, capsys):
    store = Store.create(str(tmp_path / "store"))
    undisturbed = _torch_estimator(store, "undisturbed").fit(train_df)
    assert undisturbed.getHistory()["num_ranks"] == [3] * EPOCHS
    capsys.readouterr()

    marker = str(tmp_path / "killed")
    model = _torch_estimator(store, "killed", [KillExecutorAtStep(marker, rank=2, epoch=1, step=5)]).fit(train_df)
    out, err = capsys.readouterr()
    assert os.path.exists(marker), "the callback never killed an executor"
    history = model.getHistory()
    # Every epoch completed once; the interrupted one (epoch 2 of 5) ran again on the survivors.
    assert len(history["loss"]) == EPOCHS, history
    assert history["num_ranks"][0] == 3 and history["num_ranks"][1] == 2, history
    assert "lost worker 2 (rank 2)" in err, err
    assert "training resumed at epoch 2/%d on 2 rank(s)" % EPOCHS in out, out
    assert "epoch %d/%d - loss: " % (EPOCHS, EPOCHS) in out, out
    # The checkpoints in the store are whole: the newest is the last epoch's and loads.
    names = [posixpath.basename(p) for p in store.list(store.get_checkpoint_path("killed"))]
    assert names == ["epoch-%05d.ckpt" % (EPOCHS - 1), "epoch-%05d.ckpt" % EPOCHS], names
    from horovod_spark.estimator.torch_remote import load_checkpoint
    last = load_checkpoint(store.read_bytes(posixpath.join(store.get_checkpoint_path("killed"), names[-1])))
    assert last["epochs_done"] == EPOCHS and len(last["history"]["loss"]) == EPOCHS

    reference = _held_out_accuracy(undisturbed)
    accuracy = _held_out_accuracy(model)
    print("held-out accuracy: undisturbed %.3f, with an executor killed %.3f" % (reference, accuracy))
    assert reference > 0.9 and accuracy > reference - 0.03, (reference, accuracy)


def test_elastic_params_are_checked_before_any_job(tmp_path):
    store = Store.create(str(tmp_path / "store"))
    with pytest.raises(ValueError, match="min_num_proc=2 applies to elastic fits only: pass elastic=True"):
        _check(store, elastic=False, min_num_proc=2)
    with pytest.raises(ValueError, match="min_num_proc=3 is more than max_num_proc=2"):
        _check(store, min_num_proc=3, max_num_proc=2)
    assert _check(store).elastic is not None and _check(store, elastic=False).elastic is None


def _check(store, **params):
    from horovod_spark.estimator.common.checks import check_common
    est = _torch_estimator(store, "checked")
    est._set(**params)
    return check_common(est)
