"""horovod.spark's estimator keywords on real fits (one local[2] SparkSession): loss_weights on both
estimators, loss_constructors and train_minibatch_fn on TorchEstimator, partitions_per_process and
mp_start_method, shuffle_buffer_size and the Petastorm reader knobs mapped onto this project's
settings; Horovod's feature_columns / label_columns on the models.

With a learning rate of 0 (or a step that never updates) the weights stay as initialised, so every
epoch's loss is the untrained model's loss over all rows, computed here in one process."""
import glob
import multiprocessing
import sys

import cloudpickle
import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

from horovod_spark.estimator import KerasEstimator, KerasModel, TorchEstimator, TorchModel  # noqa: E402
from horovod_spark.estimator.common.checks import _reader_options, check_common  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = [pytest.mark.timeout(600)]

NUM_PROC = 2
ROWS = 96  # 48 per rank: 3 whole batches of 16, so an epoch sees every row once

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.a(x), self.b(x)


class StartMethodIs:
    """Fails the rank unless multiprocessing's start method there is ``method``."""

    def __init__(self, method):
        self.method = method

    def on_train_begin(self, rank, size):
        found = multiprocessing.get_start_method(allow_none=True)
        if found != self.method:
            raise RuntimeError("rank %d: multiprocessing start method %r, not %r" % (rank, found, self.method))


@pytest.fixture(scope="module")
def spark_master():
    return "local[%d]" % NUM_PROC


def _data():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(ROWS, 3)).astype(np.float32)
    y1 = x @ np.array([1.0, -1.0, 2.0], np.float32) + 0.5
    y2 = x @ np.array([-0.5, 0.3, 0.0], np.float32) - 1.0
    return x, y1.astype(np.float32), y2.astype(np.float32)


@pytest.fixture(scope="module")
def df(spark):
    x, y1, y2 = _data()
    return spark.createDataFrame([(x[i].tolist(), float(y1[i]), float(y2[i])) for i in range(ROWS)],
                                 ["x", "y1", "y2"]).cache()


def _torch_net():
    torch.manual_seed(0)
    return TwoHeads()


def _untrained_losses(net):
    x, y1, y2 = (torch.from_numpy(a) for a in _data())
    with torch.no_grad():
        a, b = net(x)
    return (float(torch.nn.functional.mse_loss(a, y1.reshape(-1, 1))),
            float(torch.nn.functional.l1_loss(b, y2.reshape(-1, 1))))


def _torch_estimator(store, net, **kwargs):
    return TorchEstimator(num_proc=NUM_PROC, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.0),
                          feature_cols=["x"], label_cols=["y1", "y2"], batch_size=16, epochs=2, random_seed=3,
                          store=store, verbose=0, **kwargs)


def test_torch_loss_constructors_and_loss_weights(df, tmp_path):
    net = _torch_net()
    mse, l1 = _untrained_losses(net)
    store = Store.create(str(tmp_path))
    est = _torch_estimator(store, net, loss_constructors=[torch.nn.MSELoss, lambda: torch.nn.L1Loss()],
                           loss_weights=[0.5, 3.0], partitions_per_process=2, shuffle_buffer_size=0,
                           train_reader_num_workers=4, val_reader_num_workers=2, reader_pool_type="process",
                           mp_start_method="forkserver", callbacks=[StartMethodIs("forkserver")],
                           continuous_cols=["x"], categorical_cols=[])
    history = est.fit(df).getHistory()
    assert history["y1_loss"] == pytest.approx([mse] * 2, rel=1e-5)  # each label's own loss, unweighted
    assert history["y2_loss"] == pytest.approx([l1] * 2, rel=1e-5)
    assert history["loss"] == pytest.approx([0.5 * mse + 3.0 * l1] * 2, rel=1e-5)
    # partitions_per_process: the prepared training data is written as that many files per rank
    files = glob.glob(str(tmp_path / "intermediate_data" / "*" / "train" / "*.parquet"))
    assert len(files) == 2 * NUM_PROC
    assert est.getLossConstructors()[0] is torch.nn.MSELoss and est.getShufflingBufferSize() == 0


def _frozen_step():
    """A step factory (the form Horovod's Param documentation describes) returning a step of seven
    arguments, in the form of Horovod's gradient-clipping recipe (synchronize, change the averaged
    gradients, step without synchronizing again) that clips every gradient to 0: with plain SGD the
    weights never move."""
    def train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights):
        optimizer.zero_grad()
        outputs, labels = transform_outputs(model(*inputs), labels)
        loss = loss_fn(outputs, labels, sample_weights)
        loss.backward()
        optimizer.synchronize()
        for p in model.parameters():
            p.grad.zero_()
        with optimizer.skip_synchronize():
            optimizer.step()
        return outputs, loss
    return train_minibatch


def test_torch_train_minibatch_fn_replaces_the_training_step(df, tmp_path):
    net = _torch_net()
    mse, l1 = _untrained_losses(net)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    est = TorchEstimator(num_proc=NUM_PROC, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.5),
                         loss=[torch.nn.functional.mse_loss, torch.nn.functional.l1_loss], loss_weights=[2.0, 1.0],
                         feature_cols=["x"], label_cols=["y1", "y2"], batch_size=16, epochs=2, random_seed=3,
                         store=Store.create(str(tmp_path)), verbose=0, train_minibatch_fn=_frozen_step)
    fitted = est.fit(df)
    # lr=0.5 would have moved the weights with the built-in step
    for name, value in fitted.getModel().state_dict().items():
        assert torch.equal(value, before[name]), name
    assert fitted.getHistory()["loss"] == pytest.approx([2.0 * mse + l1] * 2, rel=1e-5)
    assert fitted.getHistory()["y2_loss"] == pytest.approx([l1] * 2, rel=1e-5)


def horovods_step(model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights,
                  backward_passes_per_step, batch_idx):
    """Horovod 0.28's own default step: it steps at the start of the next window, so the estimator
    applies each epoch's last window after the epoch's last batch."""
    if batch_idx % backward_passes_per_step == 0:
        if batch_idx != 0:
            optimizer.step()
        optimizer.zero_grad()
    outputs, labels = transform_outputs(model(*inputs), labels)
    loss = loss_fn(outputs, labels, sample_weights)
    if backward_passes_per_step > 1:
        loss = loss / backward_passes_per_step
    loss.backward()
    return outputs, loss


def test_horovods_default_step_trains_as_the_built_in_step(df, tmp_path):
    trained = []
    for step in (None, horovods_step):
        net = _torch_net()
        est = TorchEstimator(num_proc=NUM_PROC, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.05),
                             loss=torch.nn.functional.mse_loss, feature_cols=["x"], label_cols=["y1", "y2"],
                             batch_size=16, epochs=2, random_seed=3, shuffle=False, backward_passes_per_step=2,
                             store=Store.create(str(tmp_path / str(len(trained)))), verbose=0,
                             train_minibatch_fn=step)
        trained.append(est.fit(df).getModel().state_dict())
    for name, value in trained[0].items():
        assert not torch.equal(value, _torch_net().state_dict()[name]), "the fit did not train %s" % name
        torch.testing.assert_close(trained[1][name], value, rtol=1e-6, atol=1e-7)


def test_keras_loss_weights(df, tmp_path):
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    inp = keras.Input((3,))
    model = keras.Model(inp, [keras.layers.Dense(1, name="a")(inp), keras.layers.Dense(1, name="b")(inp)])
    x, y1, y2 = _data()
    a, b = (o.numpy() for o in model(x))
    mse = float(np.mean((a[:, 0] - y1) ** 2))
    mae = float(np.mean(np.abs(b[:, 0] - y2)))
    est = KerasEstimator(num_proc=NUM_PROC, model=model, optimizer=keras.optimizers.SGD(0.0), loss=["mse", "mae"],
                         loss_weights=[0.25, 4.0], feature_cols=["x"], label_cols=["y1", "y2"], batch_size=16,
                         epochs=1, random_seed=3, shuffle=True, shuffle_buffer_size=32,
                         store=Store.create(str(tmp_path)), verbose=0)
    history = est.fit(df).getHistory()
    assert history["loss"] == pytest.approx([0.25 * mse + 4.0 * mae], rel=1e-4)


def test_shuffle_buffer_size_and_reader_knobs_map_onto_ours(tmp_path):
    def cfg(**kwargs):
        return check_common(TorchEstimator(feature_cols=["x"], label_cols=["y1"], store=str(tmp_path), **kwargs))
    assert (cfg(shuffle_buffer_size=500).shuffle, cfg(shuffle_buffer_size=500).shuffle_buffer_rows) == (True, 500)
    assert (cfg(shuffle_buffer_size=0).shuffle, cfg(shuffle_buffer_size=0).shuffle_buffer_rows) == (True, 0)
    assert (cfg(shuffle=False, shuffle_buffer_size=500).shuffle, cfg(shuffle=500).shuffle_buffer_rows) == (False, 500)
    assert cfg(train_reader_num_workers=8, reader_pool_type="process").train_reader_options == {}  # Arrow: none
    est = TorchEstimator(train_reader_num_workers=8, val_reader_num_workers=2, reader_pool_type="process")
    assert _reader_options(est.getOrDefault, "petastorm") == (
        {"reader_pool_type": "process", "read_threads": 8}, {"reader_pool_type": "process", "read_threads": 2})
    assert _reader_options(TorchEstimator().getOrDefault, "petastorm") == (
        {"reader_pool_type": "thread"}, {"reader_pool_type": "thread"})
    assert est.getTrainReaderNumWorker() == 8 and est.getValReaderNumWorker() == 2


def test_models_take_horovods_column_keywords():
    net = _torch_net()
    model = TorchModel(model=net, feature_columns=["x"], label_columns=["y1", "y2"])
    assert model.getFeatureColumns() == model.getOrDefault("feature_cols") == ["x"]
    assert model.getLabelColumns() == ["y1", "y2"] and model.resolved_output_cols() == ["y1__output", "y2__output"]
    assert KerasModel(feature_columns="x", label_cols=["y"]).getOrDefault("feature_cols") == ["x"]
    assert TorchModel(feature_cols=["x"], feature_columns=["x"]).getFeatureColumns() == ["x"]
    with pytest.raises(ValueError, match="feature_cols=.*and feature_columns=.*same Param, give one"):
        TorchModel(feature_cols=["x"], feature_columns=["z"])
    assert model.setLabelColumns(["y2"]).getOrDefault("label_cols") == ["y2"]


def _with_weight_field(batch):
    out = dict(batch)
    out["w"] = np.ones(len(batch["x"]), np.float32)
    return out


def test_transformation_fields_are_checked_on_every_rank(df, tmp_path):
    """Horovod's transformation_edit_fields / transformation_removed_fields: a declaration that
    matches the function fits; one that does not fails the fit naming the field."""
    net = _torch_net()
    mse, l1 = _untrained_losses(net)
    fitted = _torch_estimator(Store.create(str(tmp_path / "ok")), net, loss=[torch.nn.functional.mse_loss,
                                                                              torch.nn.functional.l1_loss],
                              transformation_fn=_with_weight_field, compress_sparse_cols=True,
                              transformation_edit_fields=[("w", np.float32, (), False), ("x", np.float64, (3,), False)],
                              transformation_removed_fields=["dropped"]).fit(df)
    assert fitted.getHistory()["loss"] == pytest.approx([mse + l1] * 2, rel=1e-5)
    est = _torch_estimator(Store.create(str(tmp_path / "bad")), _torch_net(),
                           loss=[torch.nn.functional.mse_loss, torch.nn.functional.l1_loss],
                           transformation_fn=_with_weight_field,
                           transformation_edit_fields=[("w", np.float64, None, False)])
    with pytest.raises(Exception, match="field 'w' has dtype float32, but transformation_edit_fields declares float64"):
        est.fit(df)


def test_declared_transformation_names_each_mismatch():
    from horovod_spark.estimator.common.transformation_schema import DeclaredTransformation, check_edit_fields
    batch = {"x": np.zeros((4, 3), np.float32), "y": np.zeros(4, np.float32)}
    fields = check_edit_fields([("x", "float32", (None,), False), ("w", np.int64, [2], True)])
    assert fields[1] == ("w", np.dtype(np.int64), (2,), True)
    ok = DeclaredTransformation(lambda b: dict(b, w=np.zeros((4, 2), np.int64)), fields, ["y2"])
    assert set(ok(batch)) == {"x", "y", "w"}
    cases = [
        (DeclaredTransformation(lambda b: b, fields, []), "has no field 'w'"),
        (DeclaredTransformation(lambda b: dict(b, w=np.zeros((4, 3), np.int64)), fields, []),
         r"field 'w' has per-row shape \(3,\), but transformation_edit_fields declares \(2,\)"),
        (DeclaredTransformation(lambda b: b, [], ["y"]), "returned field 'y', which transformation_removed_fields"),
        (DeclaredTransformation(lambda b: [b], [], ["y"]), "returned list, not a batch dict"),
    ]
    for fn, message in cases:
        with pytest.raises(ValueError, match=message):
            fn(batch)
