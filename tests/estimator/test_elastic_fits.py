"""Elastic estimator fits (``elastic=True``) on local-cluster[3,1,1024]: three executor JVMs, one
rank each. During an epoch, the rank 2's executor JVM is SIGKILLed (by the rank itself, from a
callback, so the kill follows training progress): the fit goes on with the survivors from the
start of the interrupted epoch; the cluster starts a new executor, Spark reschedules the lost task
there, and the fit grows back to three ranks at an epoch's end (the survivors wait for it there, so
the join happens however fast the machine trains); every epoch finishes, and the model is as
accurate on held-out rows as an undisturbed fit's."""
import os
import posixpath
import re
import sys

import cloudpickle
import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

from pyspark.ml.linalg import Vectors  # noqa: E402
from support.executor_kill import (  # noqa: E402
    AwaitReplacement,
    ExecutorReaper,
    KillExecutorAtStep,
    keras_await_replacement,
    keras_kill_callback,
)

from horovod_spark.estimator import TorchEstimator  # noqa: E402
from horovod_spark.exceptions import ElasticJobError  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

# Generous: Spark and three ranks on a small shared machine; each fit takes seconds when it is idle.
pytestmark = pytest.mark.timeout(900)

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


def _replayed(capsys):
    """The fit's output, written again so that a failure's report shows all of it."""
    out, err = capsys.readouterr()
    sys.stdout.write(out)
    sys.stderr.write(err)
    return out, err


def _check_ranks_per_epoch(num_ranks, err):
    # Epoch 2 ran on the two survivors, or on three when the driver learnt of the loss and of the
    # rescheduled task in the same poll; from epoch 3 on the job is whole again.
    assert num_ranks[0] == 3 and num_ranks[1] in (2, 3) and num_ranks[2:] == [3] * (EPOCHS - 2), (num_ranks, err)


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
    # min_num_proc=3: an elastic fit starts with the tasks that have slots, and an executor still
    # busy with the previous test's tasks would make the reference a fit that grew from 2 ranks.
    undisturbed = _torch_estimator(store, "undisturbed", min_num_proc=3).fit(train_df)
    assert undisturbed.getHistory()["num_ranks"] == [3] * EPOCHS
    capsys.readouterr()

    marker = str(tmp_path / "killed")
    callbacks = [KillExecutorAtStep(marker, rank=2, epoch=1, step=5), AwaitReplacement(marker, size=3)]
    model = _torch_estimator(store, "killed", callbacks).fit(train_df)
    out, err = _replayed(capsys)
    assert os.path.exists(marker), "the callback never killed an executor"
    history = model.getHistory()
    # Every epoch completed once; the interrupted one (epoch 2 of 5) ran again on the survivors,
    # and the rescheduled task joined at its end.
    assert len(history["loss"]) == EPOCHS, history
    _check_ranks_per_epoch(history["num_ranks"], err)
    assert "lost worker 2 (rank 2)" in err, err
    assert "worker 3 joined" in err, err
    assert re.search(r"training resumed at epoch 2/%d on [23] rank\(s\)" % EPOCHS, out), out
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


def test_keras_fit_survives_an_executor_killed_mid_epoch(spark, tmp_path, capsys):
    pytest.importorskip("keras")
    from support.keras_data import classification_df, two_input_model

    from horovod_spark.estimator import KerasEstimator
    df = classification_df(spark, n=900).repartition(3).cache()
    store = Store.create(str(tmp_path / "store"))
    marker = str(tmp_path / "killed")

    def fit(run_id, callbacks):
        est = KerasEstimator(num_proc=3, model=two_input_model(lr=0.05), feature_cols=["vec", "arr"],
                             label_cols=["label"], validation="is_val", batch_size=16, epochs=EPOCHS, random_seed=2,
                             store=store, run_id=run_id, callbacks=callbacks, elastic=True)
        return est.fit(df)

    undisturbed = fit("undisturbed", [])
    capsys.readouterr()
    model = fit("killed", [keras_kill_callback(marker, rank=2, epoch=1, step=5),
                           keras_await_replacement(marker, size=3)])
    out, err = _replayed(capsys)
    assert os.path.exists(marker), "the callback never killed an executor"
    history = model.getHistory()
    assert len(history["loss"]) == EPOCHS, history
    _check_ranks_per_epoch(history["num_ranks"], err)
    assert "lost worker 2 (rank 2)" in err, err
    assert "worker 3 joined" in err, err
    assert re.search(r"training resumed at epoch 2/%d on [23] rank\(s\)" % EPOCHS, out), out
    reference, accuracy = undisturbed.getHistory()["val_accuracy"][-1], history["val_accuracy"][-1]
    print("validation accuracy: undisturbed %.3f, with an executor killed %.3f" % (reference, accuracy))
    assert reference > 0.8 and accuracy > reference - 0.05, (reference, accuracy)


def test_a_loss_below_min_num_proc_ends_the_fit_naming_what_was_lost(spark, train_df, tmp_path, monkeypatch):
    # The cluster cannot replace the lost executor (each new one is killed as it starts), so the two
    # survivors wait elastic_timeout for a third rank, then the fit fails. Last in the module: the
    # cluster keeps two executors afterwards.
    monkeypatch.setenv("HOROVOD_ELASTIC_TIMEOUT", "5")
    store = Store.create(str(tmp_path / "store"))
    reaper = ExecutorReaper(spark.sparkContext.applicationId).arm()
    try:
        est = _torch_estimator(store, "below-min", [KillExecutorAtStep(str(tmp_path / "killed"), rank=2, epoch=1,
                                                                       step=5)], min_num_proc=3)
        with pytest.raises(ElasticJobError) as info:
            est.fit(train_df)
    finally:
        reaper.stop()
    message = str(info.value)
    assert "the elastic fit of run below-min (num_proc=3, min_num_proc=3) stopped" in message, message
    assert "lost worker 2 (rank 2)" in message and "fewer than min_num_proc=3" in message, message
    assert "fit again with run_id='below-min'" in message, message
    # The epoch finished before the loss is checkpointed, whole, for that next fit.
    names = [posixpath.basename(p) for p in store.list(store.get_checkpoint_path("below-min"))]
    assert names == ["epoch-00001.ckpt"], names
