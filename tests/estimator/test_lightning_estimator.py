"""LightningEstimator (horovod_spark.spark.lightning.TorchEstimator) on one local[2] SparkSession:
real fits of a LightningModule with validation, callbacks, a logger and an LR scheduler; transform,
save/load, resume by run_id, trainer_args, and a LightningDataModule of the user's."""
import glob
import os
import sys

import cloudpickle
import numpy as np
import pytest

pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from support import lightning_estimator_models as models  # noqa: E402
from support.tensorboard_events import assert_matches_history  # noqa: E402

from horovod_spark.estimator import LightningEstimator, LightningModel, TorchModel  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(600)

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(models)
EPOCHS = 3


@pytest.fixture(scope="module")
def train_df(spark):
    df = models.data_frame(spark, 480, 0).cache()
    df.count()  # cached now: every fit sees the same plan, and so the same prepared data
    return df


def _estimator(store, run_id, **params):
    torch.manual_seed(0)
    options = dict(num_proc=2, model=models.Classifier(halve_lr=True), feature_cols=["features"],
                   label_cols=["label"], validation=0.25, batch_size=16, epochs=EPOCHS, random_seed=0, store=store,
                   run_id=run_id, verbose=1)
    options.update(params)
    return LightningEstimator(**options)


@pytest.fixture(scope="module")
def fitted(train_df, tmp_path_factory):
    store = Store.create(str(tmp_path_factory.mktemp("store")))
    callbacks = [pl.callbacks.LearningRateMonitor(), pl.callbacks.ModelCheckpoint(monitor="val_loss", save_top_k=1)]
    est = _estimator(store, "main", callbacks=callbacks, logger=pl.loggers.CSVLogger("anywhere"))
    return est, est.fit(train_df), store


@pytest.mark.legacy_stack
def test_fit_learns_and_records_what_the_module_logged(fitted):
    _, model, _ = fitted
    assert isinstance(model, LightningModel) and isinstance(model, TorchModel)
    history = model.getHistory()
    for name in ("train_loss", "val_loss", "val_acc", "lr-Adam"):
        assert len(history[name]) == EPOCHS, history
    assert history["val_loss"][-1] < history["val_loss"][0], history
    # The LR scheduler from configure_optimizers halved the learning rate every epoch.
    np.testing.assert_allclose(history["lr-Adam"], [0.05, 0.025, 0.0125], rtol=1e-6)
    assert models.held_out_accuracy(model.getModel()) > 0.8


def test_logger_and_checkpoint_files_land_in_the_store_run(fitted):
    _, _, store = fitted
    logs = store.get_logs_path("main")
    metrics = glob.glob(os.path.join(logs, "lightning_logs", "version_*", "metrics.csv"))
    assert len(metrics) == 1, os.listdir(logs)
    header = open(metrics[0]).readline()
    assert "val_loss" in header and "lr-Adam" in header
    assert glob.glob(os.path.join(logs, "**", "*.ckpt"), recursive=True), "ModelCheckpoint wrote no file"
    assert sorted(os.listdir(store.get_checkpoint_path("main"))) == ["epoch-00002.ckpt", "epoch-00003.ckpt"]


@pytest.mark.legacy_stack
def test_transform_is_the_module_forward(fitted, train_df):
    _, model, _ = fitted
    rows = model.transform(train_df).orderBy("id").select("features", "label__output").collect()
    module = model.getModel()
    with torch.no_grad():
        expected = module(torch.tensor(np.array([r["features"].toArray() for r in rows]), dtype=torch.float32))
    np.testing.assert_allclose(np.array([r["label__output"] for r in rows]), expected.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.legacy_stack
def test_save_and_load(fitted, train_df, tmp_path):
    _, model, _ = fitted
    path = str(tmp_path / "model")
    model.write().overwrite().save(path)
    loaded = LightningModel.load(path)
    assert isinstance(loaded.getModel(), models.Classifier)
    assert loaded.getHistory() == model.getHistory()
    first = train_df.orderBy("id").limit(20)
    got = [r["label__output"] for r in loaded.transform(first).collect()]
    want = [r["label__output"] for r in model.transform(first).collect()]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_fit_with_the_same_run_id_resumes_after_the_last_epoch(fitted, train_df, capsys):
    est, model, store = fitted
    resumed = est.copy({est.epochs: EPOCHS + 2}).fit(train_df)
    out = capsys.readouterr().out
    assert "resuming after epoch %d" % EPOCHS in out, out
    history = resumed.getHistory()
    assert len(history["val_loss"]) == EPOCHS + 2
    assert history["val_loss"][:EPOCHS] == model.getHistory()["val_loss"]
    # The scheduler and the optimizer went on from their checkpointed state.
    np.testing.assert_allclose(history["lr-Adam"], [0.05 / 2 ** e for e in range(EPOCHS + 2)], rtol=1e-6)


def test_trainer_args_override_what_the_estimator_sets(train_df, tmp_path):
    model = _estimator(Store.create(str(tmp_path)), "override", trainer_args={"max_epochs": 1}).fit(train_df)
    assert len(model.getHistory()["val_loss"]) == 1


@pytest.mark.parametrize("as_class", [False, True])
def test_a_lightning_data_module_replaces_the_prepared_data(train_df, tmp_path, as_class):
    # EarlyStopping that never sees enough improvement stops every rank after the second epoch.
    stop = pl.callbacks.EarlyStopping(monitor="val_loss", patience=0, min_delta=10.0)
    data_module = models.TensorDataModule if as_class else models.TensorDataModule(train_batch_size=16)
    store = Store.create(str(tmp_path))
    model = _estimator(store, "data-module", data_module=data_module, epochs=5, callbacks=[stop]).fit(train_df)
    history = model.getHistory()
    assert len(history["val_loss"]) == 2, history
    assert models.held_out_accuracy(model.getModel()) > 0.75
    # No logger given: Lightning's TensorBoardLogger wrote the epochs into the store's run logs.
    version = os.path.join(store.get_logs_path("data-module"), "lightning_logs", "version_0")
    assert_matches_history(version, history, steps_are_epochs=False)
