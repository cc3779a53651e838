"""KerasEstimator as a Spark ML citizen, written as user code: the estimator saves and loads (its
compiled model, custom layer and optimizer included) and fits the same; prediction columns follow the
label column's type as in Horovod; Spark ML's classifier columns feed Spark's evaluators."""
import sys

import cloudpickle
import numpy as np
import pytest
from support.keras_data import CLASSES

pyspark = pytest.importorskip("pyspark")
keras = pytest.importorskip("keras")

from pyspark.ml import Pipeline  # noqa: E402
from pyspark.ml.evaluation import MulticlassClassificationEvaluator  # noqa: E402
from pyspark.ml.linalg import Vectors, VectorUDT  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from horovod_spark.estimator import KerasEstimator, KerasModel  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = [pytest.mark.timeout(600), pytest.mark.legacy_stack]

# The layer below travels by value, as a notebook's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Scale(keras.layers.Layer):
    """A custom layer: loading a model that has it needs custom_objects."""

    def __init__(self, factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return dict(super().get_config(), factor=self.factor)


@pytest.fixture(scope="module")
def df(spark):
    """300 rows: a 4-vector of features, a class label, the same as a two-value vector label (is it
    class 0?) and a double target."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    label = (x @ np.random.default_rng(1).normal(size=(4, CLASSES))).argmax(axis=1)
    rows = [(Vectors.dense(x[i].tolist()), int(label[i]), Vectors.dense([float(label[i] == 0), float(label[i] != 0)]),
             float(x[i].sum())) for i in range(len(x))]
    schema = T.StructType([T.StructField("features", VectorUDT()), T.StructField("label", T.IntegerType()),
                           T.StructField("pair", VectorUDT()), T.StructField("target", T.DoubleType())])
    return spark.createDataFrame(rows, schema).coalesce(1).cache()


def _classifier():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    hidden = Scale(2.0)(keras.layers.Dense(8, activation="relu")(inputs))
    out = keras.layers.Dense(CLASSES, activation="softmax")(hidden)
    return keras.Model(inputs, out)


def test_estimator_saves_loads_alone_and_in_a_pipeline_and_fits_the_same(spark, df, tmp_path):
    model = _classifier()
    # Compiled: its loss and metrics stand in for the unset Params; the optimizer Param overrides its own.
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    est = KerasEstimator(num_proc=1, model=model, optimizer=keras.optimizers.SGD(0.05),
                         custom_objects={"Scale": Scale}, feature_cols=["features"], label_cols=["label"],
                         batch_size=16, epochs=1, random_seed=3, shuffle=False, verbose=0, use_gpu=False,
                         store=Store.create(str(tmp_path / "store")))
    path = str(tmp_path / "estimator")
    est.write().overwrite().save(path)
    loaded = KerasEstimator.load(path)
    assert loaded.uid == est.uid and loaded.getCustomObjects() == {"Scale": Scale}
    assert isinstance(loaded.getOptimizer(), keras.optimizers.SGD)
    assert float(loaded.getOptimizer().learning_rate) == pytest.approx(0.05)
    assert loaded.getModel().compiled and isinstance(loaded.getModel().layers[2], Scale)
    for mine, theirs in zip(loaded.getModel().get_weights(), model.get_weights()):
        np.testing.assert_array_equal(mine, theirs)

    pipeline_path = str(tmp_path / "pipeline")
    Pipeline(stages=[est]).save(pipeline_path)
    refit = Pipeline.load(pipeline_path).fit(df).stages[-1]
    original = est.fit(df)
    assert isinstance(refit, KerasModel)
    assert set(refit.getHistory()) == set(original.getHistory()) == {"loss", "accuracy"}
    for name, values in original.getHistory().items():
        assert refit.getHistory()[name] == pytest.approx(values, rel=1e-5), name


def test_prediction_columns_follow_the_label_types(spark, df, tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    outputs = [keras.layers.Dense(CLASSES, activation="softmax")(hidden), keras.layers.Dense(2)(hidden),
               keras.layers.Dense(1)(hidden)]
    est = KerasEstimator(num_proc=1, model=keras.Model(inputs, outputs), optimizer=keras.optimizers.Adam(0.01),
                         loss=["sparse_categorical_crossentropy", "mse", "mse"], feature_cols=["features"],
                         label_cols=["label", "pair", "target"], epochs=1, verbose=0, use_gpu=False,
                         store=Store.create(str(tmp_path)))
    model = est.fit(df)
    assert model.getLabelTypes() == ["int", "array", "double"]
    pred = model.transform(df)
    assert isinstance(pred.schema["label__output"].dataType, VectorUDT)
    assert isinstance(pred.schema["pair__output"].dataType, VectorUDT)
    assert pred.schema["target__output"].dataType == T.DoubleType()
    row = pred.first()
    scores, pair, target = model.getModel().predict_on_batch(row.features.toArray()[None].astype("float32"))
    np.testing.assert_allclose(row.label__output.toArray(), scores[0], rtol=1e-5)
    np.testing.assert_allclose(row.pair__output.toArray(), pair[0], rtol=1e-5)
    assert row.target__output == pytest.approx(float(target[0, 0]), rel=1e-5)


def test_probability_outputs_give_spark_classifier_columns(spark, df, tmp_path):
    est = KerasEstimator(num_proc=1, model=_classifier(), optimizer=keras.optimizers.Adam(0.05),
                         loss="sparse_categorical_crossentropy", custom_objects={"Scale": Scale},
                         feature_cols=["features"], label_cols=["label"], classification="probabilities",
                         batch_size=16, epochs=3, verbose=0, use_gpu=False, store=Store.create(str(tmp_path)))
    model = est.fit(df)
    pred = model.transform(df)
    assert pred.columns[-4:] == ["label__output", "rawPrediction", "probability", "prediction"]
    row = pred.first()
    np.testing.assert_allclose(row.probability.toArray(), row.label__output.toArray(), rtol=1e-6)
    np.testing.assert_allclose(row.rawPrediction.toArray(), row.label__output.toArray(), rtol=1e-6)
    assert row.prediction == float(np.argmax(row.label__output.toArray()))
    assert MulticlassClassificationEvaluator(metricName="accuracy").evaluate(pred) > 0.7
    # Saved and loaded, the model keeps the Param and gives the same columns.
    path = str(tmp_path / "model")
    model.save(path)
    loaded = KerasModel.load(path)
    assert loaded.getClassification() == "probabilities" and loaded.getLabelTypes() == ["int"]
    assert loaded.transform(df).columns == pred.columns
