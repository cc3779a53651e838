"""Numbers that are not finite: a NaN training loss stops a TorchEstimator / KerasEstimator fit with
an error naming the epoch and step (nonfinite_loss='warn' warns instead), and validate_finite=True
refuses NaN or infinite feature values before the training job."""
import math
import sys
import warnings

import cloudpickle
import pytest

from horovod_spark.estimator.common.nonfinite import LossGuard, nonfinite_counts
from horovod_spark.exceptions import NonFiniteLossError

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

from horovod_spark.estimator import TorchEstimator  # noqa: E402
from horovod_spark.spark import RankFailedError  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(300)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROWS = 16


def _rows(nan_every: int):
    """x is NaN in every nan_every-th row (never when 0); y = 2x."""
    return [(math.nan if nan_every and i % nan_every == 0 else float(i), 2.0 * i) for i in range(ROWS)]


def _torch_estimator(store, **params):
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    return TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1e-3),
                          loss=torch.nn.functional.mse_loss, feature_cols=["x"], label_cols=["y"], batch_size=4,
                          epochs=2, shuffle=False, random_seed=1, store=store, verbose=0, **params)


def test_nan_loss_stops_a_torch_fit_naming_epoch_and_step(spark, tmp_path):
    df = spark.createDataFrame(_rows(nan_every=1), ["x", "y"])
    with pytest.raises(RankFailedError) as info:
        _torch_estimator(Store.create(str(tmp_path))).fit(df)
    text = str(info.value)
    assert "NonFiniteLossError" in text and "epoch 1, step 1" in text, text


class _ZeroUnlessPositive(torch.nn.Module):
    """relu that maps NaN to 0 (torch's own relu keeps NaN), as TensorFlow's does."""

    def forward(self, h):
        return torch.where(h > 0, h, torch.zeros_like(h))


def test_nan_weights_behind_a_finite_loss_stop_a_torch_fit(spark, tmp_path):
    # The first NaN row turns the first layer's weight NaN; from then on every hidden value is NaN,
    # mapped to 0, and the loss stays finite.
    df = spark.createDataFrame(_rows(nan_every=5), ["x", "y"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1, 4), _ZeroUnlessPositive(), torch.nn.Linear(4, 1))
    est = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1e-3),
                         loss=torch.nn.functional.mse_loss, feature_cols=["x"], label_cols=["y"], batch_size=4,
                         epochs=2, shuffle=False, random_seed=1, store=Store.create(str(tmp_path)), verbose=0)
    with pytest.raises(RankFailedError) as info:
        est.fit(df)
    text = str(info.value)
    assert "NonFiniteLossError" in text and "after epoch 1, step 2" in text and "'0.weight'" in text, text


def test_nonfinite_loss_warn_trains_on_and_warns(spark, tmp_path, capsys):
    df = spark.createDataFrame(_rows(nan_every=1), ["x", "y"])
    model = _torch_estimator(Store.create(str(tmp_path)), nonfinite_loss="warn").fit(df)
    assert math.isnan(model.getHistory()["loss"][-1])
    err = capsys.readouterr().err
    assert "nonfinite_loss='warn'" in err and "epoch 1, step 1" in err, err


def test_validate_finite_names_the_bad_column_before_training(spark, tmp_path):
    df = spark.createDataFrame(_rows(nan_every=5), ["x", "y"])
    est = _torch_estimator(Store.create(str(tmp_path)), validate_finite=True)
    with pytest.raises(ValueError, match=r"validate_finite: .* 'x' \(4 rows\)"):
        est.fit(df)
    assert not Store.create(str(tmp_path)).exists("runs")  # no run was started


def test_bad_nonfinite_loss_value_is_refused(spark, tmp_path):
    df = spark.createDataFrame(_rows(nan_every=0), ["x", "y"])
    with pytest.raises(ValueError, match="nonfinite_loss='ignore'"):
        _torch_estimator(Store.create(str(tmp_path)), nonfinite_loss="ignore").fit(df)


def test_nonfinite_counts_cover_floats_arrays_and_vectors(spark):
    from pyspark.ml.linalg import Vectors
    inf = float("inf")
    rows = [(1.0, [1.0, 2.0], Vectors.dense([1.0, 2.0]), 1),
            (math.nan, [1.0, -inf], Vectors.dense([1.0, 2.0]), 2),
            (None, [1.0, 2.0], Vectors.sparse(2, {1: math.nan}), 3)]
    df = spark.createDataFrame(rows, ["d", "arr", "vec", "i"])
    assert nonfinite_counts(df, ["d", "arr", "vec", "i"]) == {"d": 1, "arr": 1, "vec": 1}
    assert nonfinite_counts(df.limit(1), ["d", "arr", "vec"]) == {"d": 0, "arr": 0, "vec": 0}


def test_loss_guard_counts_from_one_and_warns_once_per_epoch():
    with pytest.raises(NonFiniteLossError, match="inf in epoch 3, step 5 .* on rank 1"):
        LossGuard("raise", 1).check(float("inf"), 2, 4)
    guard = LossGuard("warn", 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            guard.check(math.nan, 0, step)
        guard.check(1.0, 1, 0)
        guard.check(math.nan, 1, 1)
    assert [str(w.message).split(" (counting")[0] for w in caught] == [
        "the training loss is nan in epoch 1, step 1", "the training loss is nan in epoch 2, step 2"]
