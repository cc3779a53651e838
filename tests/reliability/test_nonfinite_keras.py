"""A NaN training loss, or NaN weights behind a finite loss, stop a KerasEstimator fit with an error naming
the epoch, step and rank."""
import math
import sys

import cloudpickle
import pytest

pyspark = pytest.importorskip("pyspark")
keras = pytest.importorskip("keras")

from horovod_spark.estimator import KerasEstimator  # noqa: E402
from horovod_spark.spark import RankFailedError  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(600)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _linear_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((1,), name="x")
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    return model


def test_nan_loss_stops_a_keras_fit_naming_epoch_and_step(spark, tmp_path):
    # Rows 0-7 are finite, then every row is NaN: each rank's third batch of 4 rows is the first NaN one.
    rows = [(float(i) if i < 8 else math.nan, 2.0 * i) for i in range(24)]
    df = spark.createDataFrame(rows, ["x", "y"]).coalesce(1)
    est = KerasEstimator(num_proc=2, model=_linear_model(), feature_cols=["x"], label_cols=["y"], batch_size=4,
                         epochs=2, shuffle=False, random_seed=1, store=Store.create(str(tmp_path)), verbose=0)
    with pytest.raises(RankFailedError) as info:
        est.fit(df)
    text = str(info.value)
    assert "NonFiniteLossError" in text and "in epoch 1, step" in text, text


def _classifier():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((2,), name="x")
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))
    model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="sparse_categorical_crossentropy")
    return model


def test_nan_features_stop_a_keras_fit_whose_loss_stays_finite(spark, tmp_path):
    # The first NaN row turns the hidden layer's kernel NaN; from then on relu maps every NaN
    # activation to 0 and the loss stays finite, so the loss alone never shows the NaN weights.
    rows = [([math.nan, 1.0] if i % 4 == 3 else [float(i % 3), 1.0], i % 3) for i in range(32)]
    df = spark.createDataFrame(rows, ["x", "y"]).coalesce(1)
    est = KerasEstimator(num_proc=2, model=_classifier(), feature_cols=["x"], label_cols=["y"], batch_size=4,
                         epochs=2, shuffle=False, random_seed=1, store=Store.create(str(tmp_path)), verbose=0)
    with pytest.raises(RankFailedError) as info:
        est.fit(df)
    text = str(info.value)
    assert "NonFiniteLossError" in text and "epoch 1, step 4" in text and "on rank" in text, text
    assert "weights" in text and "validate_finite=True" in text, text
