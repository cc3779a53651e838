"""KerasEstimator / KerasModel on one local[2] SparkSession: checks before any job, fit -> transform
of a compiled two-input model (vector + array columns) with the best-model checkpoint callback, an
uncompiled model with Params, a lambda loss, a custom layer, sample weights and a validation column,
save/load, Pipeline, and resuming a run after a failure in epoch 2."""
import contextlib
import io
import os
import posixpath
import sys
import uuid

import cloudpickle
import numpy as np
import pytest
from support.keras_data import CLASSES, accuracy, classification_df, two_input_model
from support.tensorboard_events import assert_matches_history

pyspark = pytest.importorskip("pyspark")
keras = pytest.importorskip("keras")

from pyspark.ml import Pipeline, PipelineModel  # noqa: E402
from pyspark.ml.feature import VectorAssembler  # noqa: E402
from pyspark.ml.linalg import VectorUDT  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from horovod_spark.data import petastorm_support  # noqa: E402
from horovod_spark.estimator import KerasEstimator, KerasModel  # noqa: E402
from horovod_spark.keras.callbacks import BestModelCheckpoint  # noqa: E402
from horovod_spark.spark import RankFailedError  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = [pytest.mark.timeout(600), pytest.mark.legacy_stack]

NUM_PROC = 2

# Callbacks and layers below travel by value, as a notebook's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FailInEpoch(keras.callbacks.Callback):
    """Raises in the given epoch (0-based) while the marker file exists: a crash mid-fit."""

    def __init__(self, marker, epoch, step=2):
        super().__init__()
        self.marker, self.epoch, self.step, self.current = marker, epoch, step, None

    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.current == self.epoch and batch == self.step and os.path.exists(self.marker):
            raise RuntimeError("injected failure in epoch %d" % (self.current + 1))


class Scale(keras.layers.Layer):
    """A custom layer: loading a model that has it needs custom_objects."""

    def __init__(self, factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return dict(super().get_config(), factor=self.factor)


class TorchStyleCallback:
    def on_epoch_end(self, epoch, logs):
        pass


@pytest.fixture(scope="module")
def spark_master():
    return "local[%d]" % NUM_PROC


@pytest.fixture(scope="module")
def class_df(spark):
    # One partition: fewer partitions than ranks.
    return classification_df(spark).coalesce(1).cache()


@pytest.fixture(scope="module")
def fitted(class_df, tmp_path_factory):
    """One fit shared by several tests: (estimator, model, store, what the driver printed)."""
    store = Store.create(str(tmp_path_factory.mktemp("store")))
    est = KerasEstimator(num_proc=NUM_PROC, model=two_input_model(), feature_cols=["vec", "arr"],
                         label_cols=["label"], batch_size=32, epochs=4, random_seed=7, store=store, validation=0.25,
                         run_id="fitted", checkpoint_callback=BestModelCheckpoint(monitor="val_loss"))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        model = est.fit(class_df)
    return est, model, store, printed.getvalue()


@contextlib.contextmanager
def no_spark_job(sc):
    group = "no-job-%s" % uuid.uuid4().hex
    sc.setJobGroup(group, "a check that must not run any Spark job")
    try:
        yield
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    assert sc.statusTracker().getJobIdsForGroup(group) == [], "a Spark job ran before the error"


# -- checks before any Spark job -------------------------------------------------------------------

def _unloadable_model():
    class Local(keras.layers.Layer):  # defined in a function: Keras cannot find it by name
        def call(self, x):
            return x

    return keras.Sequential([keras.Input((4,)), Local(), keras.layers.Dense(1)])


def _bad_cases(store):
    good = dict(num_proc=NUM_PROC, model=two_input_model(), feature_cols=["vec", "arr"], label_cols=["label"],
                store=store)
    uncompiled = two_input_model(compiled=False)
    return [
        (dict(store=None), "store is not set"),
        (dict(model=None), "model is not set"),
        (dict(model="net"), "model must be a keras.Model"),
        (dict(model=keras.Sequential([keras.layers.Dense(3)])), "model is not built"),
        (dict(model=uncompiled), "optimizer is not set and the model is not compiled"),
        (dict(model=uncompiled, optimizer="adam"), "loss is not set and the model is not compiled"),
        (dict(optimizer="no_such_optimizer"), "optimizer='no_such_optimizer' is not a Keras optimizer name"),
        (dict(optimizer=object()), "optimizer must be a keras.optimizers.Optimizer"),
        (dict(loss="no_such_loss"), "loss='no_such_loss' is not a Keras loss name"),
        (dict(loss=[3]), "loss must be a Keras loss name"),
        (dict(metrics=[3]), "metrics: 3 is neither"),
        (dict(gradient_compression="int8"), "gradient_compression='int8'"),
        (dict(callbacks=[TorchStyleCallback()]), "KerasEstimator takes keras.callbacks.Callback objects"),
        (dict(callbacks=[object()]), "callbacks: .* has none of the methods"),
        (dict(checkpoint_callback=object()), "checkpoint_callback must be a keras.callbacks.ModelCheckpoint"),
        (dict(custom_objects=["Scale"]), "custom_objects must be a dict"),
        (dict(model=_unloadable_model(), feature_cols=["vec"]), "does not load back.*custom_objects"),
        (dict(feature_cols=["vec", "nope"]), r"feature_cols: column\(s\) \['nope'\] not in the DataFrame"),
        (dict(validation=1.5), "validation=1.5: pass a fraction strictly between 0 and 1"),
        (dict(batch_size=0), "batch_size must be a positive integer"),
        (dict(data_module="parquet"), "data_module='parquet' is unknown"),
        # Where Petastorm imports (the older stack) it is a valid choice.
        *([] if petastorm_support.is_available() else
          [(dict(data_module="petastorm"), "data_module='petastorm' needs Petastorm.*pyarrow < 16")]),
    ], good


def test_bad_params_fail_before_any_spark_job(spark, class_df, tmp_path):
    store = Store.create(str(tmp_path / "store"))
    cases, good = _bad_cases(store)
    for overrides, message in cases:
        est = KerasEstimator(**good)
        est._set(**overrides)  # _set: None must override, which the keyword setters skip
        with no_spark_job(spark.sparkContext):
            with pytest.raises(ValueError, match=message):
                est.fit(class_df)
    assert not os.path.exists(tmp_path / "store" / "intermediate_data"), "data was prepared despite a bad param"


def test_params_and_accessors(tmp_path):
    cb = BestModelCheckpoint(monitor="val_loss")
    est = KerasEstimator(feature_cols="x", label_cols=["y"], store=str(tmp_path), custom_objects={"Scale": Scale},
                         checkpoint_callback=cb)
    assert est.getFeatureCols() == ["x"] and est.getCustomObjects() == {"Scale": Scale}
    assert est.getCheckpointCallback() is cb and est.getDataModule() == "arrow" and est.getBatchSize() == 32
    assert est.setEpochs(3) is est and est.getEpochs() == 3
    with pytest.raises(TypeError, match="keyword"):
        KerasEstimator(2)


def test_input_shapes_come_from_the_param_else_from_the_models_declared_inputs():
    """One rule for fit and transform: input_shapes when set, else the Keras model's declared input
    shapes when it declares them fully, one per feature column; otherwise None (features as they come)."""
    from horovod_spark.estimator.keras_data import input_shapes_for
    image = keras.Sequential([keras.Input((2, 2, 1)), keras.layers.Flatten(), keras.layers.Dense(3)])
    assert input_shapes_for(image, None, 1) == [[2, 2, 1]]
    assert input_shapes_for(image, [], 1) == [[2, 2, 1]]
    assert input_shapes_for(image, [[4]], 1) == [[4]]
    assert input_shapes_for(image, None, 2) is None  # one declared input for two feature columns
    sequence = keras.Sequential([keras.Input((None, 3)), keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(3)])
    assert input_shapes_for(sequence, None, 1) is None  # a free dimension: nothing to reshape to
    assert input_shapes_for(None, None, 1) is None
    assert KerasModel(model=image, feature_cols=["arr"])._input_shapes() == [[2, 2, 1]]
    assert KerasModel(model=image, feature_cols=["arr"], input_shapes=[[4]])._input_shapes() == [[4]]


def test_compile_arguments_come_from_params_then_from_the_models_compile(tmp_path):
    from horovod_spark.estimator import keras_io, keras_payload
    keras.utils.set_random_seed(0)
    inp = keras.Input((4,))
    model = keras.Model(inp, {"a": keras.layers.Dense(2, name="a")(inp), "b": keras.layers.Dense(1, name="b")(inp)})
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss={"a": "mse", "b": lambda t, p: keras.ops.abs(t - p)},
                  metrics={"a": ["mae"], "b": [keras.metrics.RootMeanSquaredError()]},
                  loss_weights={"a": 1.0, "b": 2.0})
    est = KerasEstimator(model=model)
    args = keras_payload.compile_args(est, model)
    assert args.optimizer_cls is keras.optimizers.Adam and args.optimizer_config["learning_rate"] == pytest.approx(0.01)
    assert set(args.loss) == {"a", "b"} and args.metrics["a"] == ["mae"] and args.loss_weights == {"a": 1.0, "b": 2.0}
    est.setOptimizer("sgd")
    assert keras_payload.compile_args(est, model).optimizer_cls is keras.optimizers.SGD
    # What a rank does: load the bytes (no compile state in them) and compile with the arguments.
    copy = keras_io.model_from_bytes(keras_io.model_to_bytes(model))
    assert not copy.compiled and model.compiled
    args.compile(copy, args.build_optimizer())
    logs = copy.train_on_batch(np.ones((8, 4)), {"a": np.zeros((8, 2)), "b": np.zeros((8, 1))}, return_dict=True)
    assert {"loss", "a_mae", "b_root_mean_squared_error"} <= set(logs), logs


# -- fit -> transform -------------------------------------------------------------------------------

def test_fit_transform_compiled_model_with_best_checkpoint(spark, class_df, fitted):
    est, model, store, printed = fitted
    history = model.getHistory()
    assert set(history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert all(len(v) == 4 for v in history.values())
    assert history["loss"][-1] < history["loss"][0]
    assert max(history["val_accuracy"]) > 0.85, history
    for epoch in range(1, 5):
        assert "epoch %d/4 - " % epoch in printed
    assert [posixpath.basename(p) for p in store.list(store.get_checkpoint_path("fitted"))] == \
        ["epoch-00003.ckpt", "epoch-00004.ckpt"]

    pred = model.transform(class_df)
    assert pred.columns == class_df.columns + ["label__output"]
    # An integer label with several values per row: a vector, as in Horovod.
    assert isinstance(pred.schema["label__output"].dataType, VectorUDT)
    assert accuracy(pred) > 0.85
    trained = model.getModel()
    assert trained.compiled and isinstance(trained, keras.Model)
    # The user's model object was not trained in place.
    assert not np.allclose(est.getModel().get_weights()[0], trained.get_weights()[0])

    # The model returned is the checkpoint callback's best (lowest val_loss), evaluated on the
    # prepared validation rows: each rank validated half of them, and the ranks' means were averaged.
    import pyarrow.dataset as ds
    (dataset_dir,) = store.list(store.get_intermediate_data_path())
    val = ds.dataset(posixpath.join(dataset_dir, "val"), format="parquet").to_table().to_pydict()
    vec, arr = np.array(val["vec"], dtype=np.float32), np.array(val["arr"], dtype=np.float32)
    labels = np.array(val["label"])
    half = len(labels) // 2
    losses = [trained.evaluate([vec[s], arr[s]], labels[s], verbose=0, return_dict=True)["loss"]
              for s in (slice(0, half), slice(half, None))]
    np.testing.assert_allclose(np.mean(losses), min(history["val_loss"]), rtol=1e-4)


def test_tensorboard_event_files_hold_the_history(fitted):
    pytest.importorskip("tensorboard")  # an optional extra, not in the older stack's lock
    _, model, store, _ = fitted
    assert_matches_history(store.get_logs_path("fitted"), model.getHistory())


def test_uncompiled_model_with_params_custom_layer_weights_and_validation_column(spark, tmp_path):
    """Regression with three scalar inputs through a custom layer, an optimizer name, a lambda loss,
    per-row weights, a boolean validation column and more partitions than ranks."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 3))
    y = x @ np.array([1.5, -2.0, 0.5]) + 0.3
    rows = [(float(a), float(b), float(c), float(t), 1.0 + (i % 3), i % 4 == 0)
            for i, ((a, b, c), t) in enumerate(zip(x, y))]
    df = spark.createDataFrame(rows, ["x1", "x2", "x3", "y", "w", "holdout"]).repartition(6)

    keras.utils.set_random_seed(0)
    inputs = [keras.Input((1,)) for _ in range(3)]
    out = keras.layers.Dense(1)(Scale(2.0)(keras.layers.Concatenate()(inputs)))
    model = keras.Model(inputs, out)
    est = KerasEstimator(num_proc=NUM_PROC, model=model, optimizer=keras.optimizers.SGD(0.02),
                         loss=lambda y_true, y_pred: keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1),
                         metrics=["mae"], feature_cols=["x1", "x2", "x3"], label_cols=["y"], sample_weight_col="w",
                         validation="holdout", batch_size=16, epochs=6, random_seed=1,
                         store=Store.create(str(tmp_path)), custom_objects={"Scale": Scale}, verbose=0)
    fitted_model = est.fit(df)
    history = fitted_model.getHistory()
    assert set(history) == {"loss", "mae", "val_loss", "val_mae"}, history
    assert history["val_loss"][-1] < 0.05 and history["val_loss"][-1] < history["val_loss"][0]

    pred = fitted_model.setOutputCols(["y_hat"]).transform(df.filter("holdout"))
    assert pred.schema["y_hat"].dataType == T.DoubleType()
    rows = pred.select("y", "y_hat").collect()
    errors = np.array([r["y"] - r["y_hat"] for r in rows])
    assert len(rows) == 125 and float(np.abs(errors).mean()) < 0.2
    assert isinstance(fitted_model.getModel().layers[-2], Scale)


# -- persistence and Pipeline ---------------------------------------------------------------------

def _outputs(df, col):
    return np.array([r[col] for r in df.orderBy("arr").select(col).collect()])


def test_save_load_round_trip_and_direct_model(spark, class_df, fitted, tmp_path):
    _, model, _, _ = fitted
    path = str(tmp_path / "keras_model")
    model.write().overwrite().save(path)
    model.write().overwrite().save(path)  # overwrite an existing save
    loaded = KerasModel.load(path)
    assert loaded.uid == model.uid and loaded.getHistory() == model.getHistory()
    assert loaded.getFeatureCols() == ["vec", "arr"] and loaded.getOutputShapes() == [[CLASSES]]
    expected = _outputs(model.transform(class_df), "label__output")
    np.testing.assert_allclose(_outputs(loaded.transform(class_df), "label__output"), expected, rtol=1e-6)
    with pytest.raises(Exception, match="already exists"):
        model.write().save(path)

    # A KerasModel around a trained keras.Model, with no recorded output shape: transform probes it.
    direct = KerasModel(model=model.getModel(), feature_cols=["vec", "arr"], output_cols=["scores"])
    pred = direct.transform(class_df)
    assert direct.getOutputShapes() == [[CLASSES]]
    np.testing.assert_allclose(_outputs(pred, "scores"), expected, rtol=1e-6)


def test_pipeline_with_estimator_stage_save_and_load(spark, tmp_path):
    flat = classification_df(spark, n=400, seed=5).select(
        *[F.col("arr")[i].alias("f%d" % i) for i in range(4)], "label")
    cols = ["f%d" % i for i in range(4)]
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                            keras.layers.Dense(CLASSES, activation="softmax")])
    est = KerasEstimator(num_proc=NUM_PROC, model=net, optimizer=keras.optimizers.Adam(0.03),
                         loss="sparse_categorical_crossentropy", feature_cols=["features"], label_cols=["label"],
                         batch_size=32, epochs=3, random_seed=3, store=Store.create(str(tmp_path / "store")),
                         verbose=0)
    fitted_pipeline = Pipeline(stages=[VectorAssembler(inputCols=cols, outputCol="features"), est]).fit(flat)
    assert isinstance(fitted_pipeline.stages[-1], KerasModel)
    pred = fitted_pipeline.transform(flat)

    path = str(tmp_path / "pipeline_model")
    fitted_pipeline.write().overwrite().save(path)
    loaded = PipelineModel.load(path)
    assert isinstance(loaded.stages[-1], KerasModel)
    np.testing.assert_allclose(np.array([r["label__output"] for r in loaded.transform(flat).orderBy(*cols).collect()]),
                               np.array([r["label__output"] for r in pred.orderBy(*cols).collect()]), rtol=1e-6)


def test_features_take_the_models_declared_input_shape(spark, class_df, tmp_path):
    """As Horovod's KerasEstimator: a 4-value array column feeds a (2, 2, 1) image input with no
    input_shapes given, in training and in transform."""
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((2, 2, 1)), keras.layers.Flatten(),
                            keras.layers.Dense(CLASSES, activation="softmax")])
    est = KerasEstimator(num_proc=NUM_PROC, model=net, optimizer=keras.optimizers.Adam(0.05),
                         loss="sparse_categorical_crossentropy", feature_cols=["arr"], label_cols=["label"],
                         batch_size=32, epochs=1, random_seed=3, store=Store.create(str(tmp_path / "store")),
                         verbose=0)
    model = est.fit(class_df)
    assert model.getInputShapes() == [[2, 2, 1]]
    rows = model.transform(class_df).select("label__output").collect()
    assert len(rows) == class_df.count() and len(rows[0]["label__output"]) == CLASSES


# -- checkpoints and resume ---------------------------------------------------------------------

def test_resume_after_failure_in_epoch_two(spark, class_df, tmp_path, capsys):
    store = Store.create(str(tmp_path / "store"))
    marker = tmp_path / "fail-marker"
    marker.write_text("fail while this file exists")
    est = KerasEstimator(num_proc=NUM_PROC, model=two_input_model(compiled=False), feature_cols=["vec", "arr"],
                         label_cols=["label"], optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                         loss="sparse_categorical_crossentropy", metrics=["accuracy"], batch_size=32, epochs=3,
                         random_seed=7, store=store, run_id="resumable", validation=0.2,
                         callbacks=[FailInEpoch(str(marker), epoch=1)])
    with pytest.raises(RankFailedError, match="injected failure in epoch 2"):
        est.fit(class_df)
    assert [posixpath.basename(p) for p in store.list(store.get_checkpoint_path("resumable"))] == ["epoch-00001.ckpt"]

    marker.unlink()
    capsys.readouterr()
    resumed = est.fit(class_df)
    out = capsys.readouterr().out
    assert "resuming after epoch 1" in out
    assert "epoch 1/3 - " not in out and "epoch 2/3 - " in out and "epoch 3/3 - " in out
    assert len(resumed.getHistory()["loss"]) == 3

    # The same fit without the interruption ends with the same weights and history.
    uninterrupted = est.copy({est.run_id: "straight", est.callbacks: []}).fit(class_df)
    for name, values in uninterrupted.getHistory().items():
        np.testing.assert_allclose(resumed.getHistory()[name], values, rtol=1e-5, atol=1e-6)
    for a, b in zip(resumed.getModel().get_weights(), uninterrupted.getModel().get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    # A finished run fitted again trains nothing more and returns the same model.
    again = est.fit(class_df)
    assert again.getHistory() == resumed.getHistory()
    for a, b in zip(again.getModel().get_weights(), resumed.getModel().get_weights()):
        np.testing.assert_array_equal(a, b)

    # The run id of a run with another optimizer is refused, before any Spark job.
    other = est.copy({est.optimizer: keras.optimizers.Adam(0.01)})
    with no_spark_job(spark.sparkContext):
        with pytest.raises(ValueError, match="run_id 'resumable' holds a run of a different model.*optimizer_class"):
            other.fit(class_df)
