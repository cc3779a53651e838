"""TorchEstimator / TorchModel on one local[2] SparkSession: checks before any job, fit -> transform
with vector/sparse/array/scalar columns, validation by fraction and by column, the prepared-data
cache, save/load, Pipeline, fit_on_parquet, and resuming a run after a failure in epoch 2."""
import contextlib
import os
import posixpath
import sys
import uuid

import cloudpickle
import numpy as np
import pytest

import horovod_spark
from horovod_spark.spark import RankFailedError

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

from pyspark.ml import Pipeline, PipelineModel  # noqa: E402
from pyspark.ml.feature import VectorAssembler  # noqa: E402
from pyspark.ml.linalg import Vectors, VectorUDT  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402
from support.tensorboard_events import assert_matches_history  # noqa: E402

from horovod_spark.data import petastorm_support  # noqa: E402
from horovod_spark.estimator import TorchEstimator, TorchModel  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

# legacy_stack: scripts/run_tests.sh also runs this module on the older stack (pyspark 3.5, pyarrow 14).
pytestmark = [pytest.mark.timeout(300), pytest.mark.legacy_stack]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))
NUM_PROC = 2
CLASSES = 3

# The model classes and callbacks below travel by value, as a notebook's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class TwoInputNet(torch.nn.Module):
    """Takes the vector column and the array column as two inputs."""

    def __init__(self, vec_dim=4, arr_dim=4, classes=CLASSES):
        super().__init__()
        self.fc = torch.nn.Linear(vec_dim + arr_dim, classes)

    def forward(self, vec, arr):
        return self.fc(torch.cat([vec, arr], dim=1))


class FailInEpoch:
    """Raises in the given epoch (0-based) while the marker file exists: a crash mid-fit."""

    def __init__(self, marker, epoch, step=2):
        self.marker, self.epoch, self.step = marker, epoch, step

    def on_batch_end(self, epoch, step, logs):
        if epoch == self.epoch and step == self.step and os.path.exists(self.marker):
            raise RuntimeError("injected failure in epoch %d" % (epoch + 1))


@pytest.fixture(scope="module")
def spark_master():
    return "local[%d]" % NUM_PROC


def _classification_rows(n, seed=0):
    """8 features (4 in a vector, dense or sparse by row, 4 in an array), label = argmax(W x)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    w = np.random.default_rng(100).normal(size=(8, CLASSES))
    labels = (x @ w).argmax(axis=1)
    rows = []
    for i in range(n):
        v = x[i, :4].astype(float)
        if i % 2:
            v[rng.integers(0, 4)] = 0.0  # a zero, so the sparse form really is sparse
            vec = Vectors.sparse(4, {j: float(v[j]) for j in range(4) if v[j] != 0.0})
        else:
            vec = Vectors.dense(v.tolist())
        rows.append((vec, [float(a) for a in x[i, 4:]], int(labels[i])))
    return rows


@pytest.fixture(scope="module")
def class_df(spark):
    from pyspark.ml.linalg import VectorUDT
    schema = T.StructType([T.StructField("vec", VectorUDT()), T.StructField("arr", T.ArrayType(T.FloatType())),
                           T.StructField("label", T.IntegerType())])
    # One partition: fewer partitions than ranks.
    return spark.createDataFrame(_classification_rows(600), schema).coalesce(1).cache()


def _classifier_estimator(store, **overrides):
    torch.manual_seed(0)
    model = TwoInputNet()
    params = dict(num_proc=NUM_PROC, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.05),
                  loss=torch.nn.functional.cross_entropy, metrics=["accuracy"], feature_cols=["vec", "arr"],
                  label_cols=["label"], batch_size=32, epochs=4, random_seed=7, store=store)
    params.update(overrides)
    return TorchEstimator(**params)


def _accuracy(pred_df, output_col="label__output"):
    rows = pred_df.select(output_col, "label").collect()
    predicted = np.array([np.argmax(r[output_col]) for r in rows])
    return float((predicted == np.array([r["label"] for r in rows])).mean())


@pytest.fixture(scope="module")
def fitted(class_df, tmp_path_factory):
    """One fit shared by several tests: (estimator, model, store, what the driver printed)."""
    import io
    store = Store.create(str(tmp_path_factory.mktemp("store")))
    est = _classifier_estimator(store, validation=0.25)
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

def _bad_cases(store):
    model = TwoInputNet()
    other = TwoInputNet()
    good = dict(num_proc=NUM_PROC, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                loss=torch.nn.functional.cross_entropy, feature_cols=["vec", "arr"], label_cols=["label"],
                store=store)
    return [
        (dict(store=None), "store is not set"),
        (dict(num_proc=0), "num_proc must be a positive integer"),
        (dict(num_proc=3), "num_proc=3 cannot run on this cluster.*Lower num_proc"),
        (dict(loss="cross_entropy"), "loss must be a function"),
        (dict(loss=None), "loss must be a function"),
        (dict(optimizer=torch.optim.SGD(other.parameters(), lr=0.1)),
         "optimizer: param group 0 .*not parameters of the model"),
        (dict(optimizer=None), "optimizer is not set"),
        (dict(model=None), "model is not set"),
        (dict(model="net"), "model must be a torch.nn.Module"),
        (dict(feature_cols=["vec", "nope"]), r"feature_cols: column\(s\) \['nope'\] not in the DataFrame"),
        (dict(label_cols=["missing"]), r"label_cols: column\(s\) \['missing'\] not in the DataFrame"),
        (dict(label_cols=[]), "label_cols is not set"),
        (dict(feature_cols=["vec", "label"]), "used more than once"),
        (dict(validation=1.5), "validation=1.5: pass a fraction strictly between 0 and 1"),
        (dict(validation="no_such_col"), r"validation: column\(s\) \['no_such_col'\] not in the DataFrame"),
        (dict(validation="arr"), "validation column 'arr' is also a feature"),
        (dict(validation="name"), "validation column 'name' has type string"),
        (dict(batch_size=0), "batch_size must be a positive integer"),
        (dict(epochs=0), "epochs must be a positive integer"),
        (dict(input_shapes=[[4]]), "input_shapes has 1 shapes but there are 2 columns"),
        (dict(metrics=["precision"]), "metrics: unknown metric 'precision'"),
        (dict(gradient_compression="int8"), "gradient_compression='int8'"),
        # Where Petastorm imports (the older stack: tests/test_petastorm_reader.py) it is a valid choice.
        *([] if petastorm_support.is_available() else
          [(dict(data_module="petastorm"), "data_module='petastorm' needs Petastorm.*pyarrow < 16")]),
        (dict(data_module="parquet"), "data_module='parquet' is unknown"),
        (dict(run_id="a/b"), "run_id 'a/b' is not a valid run name"),
        (dict(validation_steps_per_epoch=2), "validation_steps_per_epoch is set but validation is not"),
        (dict(callbacks=[object()]), "callbacks: .* has none of the methods"),
        (dict(feature_cols=["name"]), "column 'name' has unsupported type string.*StringIndexer"),
        # horovod.spark's keywords, checked as strictly
        (dict(loss_weights=[1.0, 2.0]), r"loss_weights: 2 weight\(s\) for 1 label column"),
        (dict(loss_weights="heavy"), "loss_weights='heavy': pass a list of numbers"),
        (dict(loss_constructors=[torch.nn.MSELoss]), "loss and loss_constructors are both set"),
        (dict(loss=None, loss_constructors=["mse"]), "loss_constructors must be functions"),
        (dict(train_minibatch_fn="step"), "train_minibatch_fn must be a function"),
        (dict(train_minibatch_fn=lambda model, optimizer: None), r"train_minibatch_fn takes 2 positional argument"),
        (dict(shuffle=100, shuffle_buffer_size=10), "both give the shuffle buffer size: pass one"),
        (dict(shuffle_buffer_size=-1), "shuffle_buffer_size=-1"),
        (dict(partitions_per_process=0), "partitions_per_process must be a positive integer"),
        (dict(train_reader_num_workers=0), "train_reader_num_workers must be a positive integer"),
        (dict(reader_pool_type="gpu"), "reader_pool_type='gpu': pass one of"),
        (dict(mp_start_method="clone"), "mp_start_method='clone': pass one of"),
        (dict(categorical_cols=["vec", "zip"]), r"categorical_cols: column\(s\) \['zip'\] are not in feature_cols"),
        (dict(transformation_edit_fields=[("x2", "float32")]), r"is not a \(name, numpy dtype, shape, is_nullable\)"),
        (dict(transformation_edit_fields=[("x2", "no-dtype", None, False)]), "which numpy does not know"),
        (dict(transformation_removed_fields=[3]), "are not field names"),
        (dict(transformation_removed_fields=["arr"]), "but no transformation_fn is set"),
    ], good


def test_bad_params_fail_before_any_spark_job(spark, class_df, tmp_path):
    store = Store.create(str(tmp_path / "store"))
    df = class_df.withColumn("name", F.lit("x"))
    cases, good = _bad_cases(store)
    for overrides, message in cases:
        est = TorchEstimator(**good)
        est._set(**overrides)  # _set: None must override, which the keyword setters skip
        with no_spark_job(spark.sparkContext):
            with pytest.raises(ValueError, match=message):
                est.fit(df)
    # Not a DataFrame at all.
    with pytest.raises(ValueError, match="needs a pyspark.sql.DataFrame"):
        TorchEstimator(**good).fit([(1.0, 2.0)])
    # horovod.spark's parameters that do not exist here say what to do instead.
    with pytest.raises(ValueError, match=r"does not take feature_columns=: it is feature_cols here"):
        TorchEstimator(feature_columns=["vec"], **good)
    with pytest.raises(ValueError, match=r"does not take nonsense=: not a parameter of TorchEstimator"):
        TorchEstimator(**good).setParams(nonsense=1)
    assert not os.path.exists(tmp_path / "store" / "intermediate_data"), "data was prepared despite a bad param"


def test_param_accessors_and_type_conversion(tmp_path):
    est = TorchEstimator(feature_cols="features", label_cols=["y"], store=str(tmp_path), validation=0.1, shuffle=1000)
    assert est.getFeatureCols() == ["features"]
    assert isinstance(est.getStore(), Store) and est.getStore().prefix_path == str(tmp_path)
    assert est.getValidation() == 0.1 and est.getShuffle() == 1000
    assert est.getBatchSize() == 32 and est.getEpochs() == 1 and est.getDataModule() == "arrow"
    assert est.setBatchSize(64) is est and est.getBatchSize() == 64
    est.setInputShapes([64])
    assert est.getInputShapes() == [[64]]
    with pytest.raises(TypeError, match="batch_size"):
        est.setBatchSize("big")
    with pytest.raises(TypeError, match="shuffle"):
        est.setShuffle("yes")
    with pytest.raises(TypeError, match="keyword"):
        TorchEstimator(2)


# -- fit -> transform -------------------------------------------------------------------------------

def test_fit_transform_dense_sparse_and_array_columns(spark, class_df, fitted):
    est, model, store, printed = fitted
    history = model.getHistory()
    assert set(history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert all(len(v) == 4 for v in history.values())
    assert history["loss"][-1] < history["loss"][0]
    assert history["val_accuracy"][-1] > 0.85, history
    # Progress reached the driver while training: one summary line per epoch, in order.
    for epoch in range(1, 5):
        assert "epoch %d/4 - loss: " % epoch in printed
    assert "val_accuracy" in printed

    pred = model.transform(class_df)
    assert pred.columns == class_df.columns + ["label__output"]
    # An integer label with several values per row: a vector, as in Horovod.
    assert isinstance(pred.schema["label__output"].dataType, VectorUDT)
    assert _accuracy(pred) > 0.85
    assert isinstance(model.getModel(), TwoInputNet) and not model.getModel().training
    # The user's model object was not trained in place.
    assert not torch.equal(est.getModel().fc.weight, model.getModel().fc.weight)


def test_tensorboard_event_files_hold_the_history(fitted):
    pytest.importorskip("tensorboard")  # an optional extra, not in the older stack's lock
    _, model, store, _ = fitted
    # Run ids begin with their start time, and the fixture's fit ran first in its store.
    run = sorted(os.listdir(store.get_runs_path()))[0]
    assert_matches_history(store.get_logs_path(run), model.getHistory())


def test_validation_by_column_sample_weights_scalar_output(spark, tmp_path):
    """Regression with one scalar output, a boolean validation column, per-row weights, and a
    DataFrame with more partitions than ranks."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 3))
    y = x @ np.array([1.5, -2.0, 0.5]) + 0.3
    rows = [(float(a), float(b), float(c), float(t), 1.0 + (i % 3), i % 4 == 0) for i, ((a, b, c), t) in
            enumerate(zip(x, y))]
    df = spark.createDataFrame(rows, ["x1", "x2", "x3", "y", "w", "holdout"]).repartition(6)
    assert df.rdd.getNumPartitions() > NUM_PROC

    class ThreeScalars(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 1)

        def forward(self, a, b, c):
            return self.fc(torch.cat([a, b, c], dim=1))

    torch.manual_seed(0)
    net = ThreeScalars()
    est = TorchEstimator(num_proc=NUM_PROC, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.05),
                         loss=torch.nn.MSELoss(reduction="none"), metrics=["mae"], feature_cols=["x1", "x2", "x3"],
                         label_cols=["y"], sample_weight_col="w", validation="holdout", batch_size=16, epochs=5,
                         random_seed=1, store=Store.create(str(tmp_path)), verbose=0)
    fitted_model = est.fit(df)
    history = fitted_model.getHistory()
    assert set(history) == {"loss", "mae", "val_loss", "val_mae"}
    assert history["val_loss"][-1] < 0.05 and history["val_loss"][-1] < history["val_loss"][0]

    pred = fitted_model.setOutputCols(["y_hat"]).transform(df.filter("holdout"))
    assert pred.schema["y_hat"].dataType == T.DoubleType()
    rows = pred.select("y", "y_hat").collect()
    errors = np.array([r["y"] - r["y_hat"] for r in rows])
    assert len(rows) == 125 and float(np.abs(errors).mean()) < 0.2


def test_integer_label_with_elementwise_loss_takes_the_output_shape(spark, tmp_path):
    """An int label against a (rows, 1) output and mse_loss: compared row by row, as Horovod does
    (it used to broadcast to rows x rows). With lr=0 the epoch's loss is the untrained model's MSE."""
    rows = [(float(i % 7) / 7, float(i % 3)) for i in range(96)]
    df = spark.createDataFrame([([a, b], int(i % 4)) for i, (a, b) in enumerate(rows)], ["x", "y"])
    torch.manual_seed(0)
    net = torch.nn.Linear(2, 1)
    expected = float(torch.nn.functional.mse_loss(
        net(torch.tensor([[a, b] for a, b in rows], dtype=torch.float32)),
        torch.tensor([[float(i % 4)] for i in range(96)])))
    est = TorchEstimator(num_proc=NUM_PROC, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.0),
                         loss=torch.nn.functional.mse_loss, feature_cols=["x"], label_cols=["y"],
                         input_shapes=[[-1, 2]],  # Horovod's batch-first form
                         batch_size=16, epochs=1, shuffle=False, store=Store.create(str(tmp_path)), verbose=0)
    history = est.fit(df).getHistory()
    assert history["loss"][0] == pytest.approx(expected, rel=1e-5)


def test_shapes_in_horovods_batch_first_form():
    from horovod_spark.estimator.common.converters import to_shapes
    with pytest.warns(UserWarning, match="batch-first form"):
        assert to_shapes([[-1, 1, 28, 28], [8]]) == [[1, 28, 28], [8]]
    assert to_shapes([[-1], [4, -1]]) == [[-1], [4, -1]]  # per-row shapes that infer a dimension


def test_second_fit_reuses_prepared_data(class_df, fitted, capsys):
    est, _, store, _ = fitted
    data_dir = store.get_intermediate_data_path()
    (key,) = [posixpath.basename(p) for p in store.list(data_dir)]
    metadata = store.get_data_metadata_path(key)
    written = os.stat(metadata).st_mtime_ns

    model = est.copy({est.epochs: 1, est.verbose: 1}).fit(class_df)
    assert "reusing prepared data %s" % key in capsys.readouterr().out
    assert [posixpath.basename(p) for p in store.list(data_dir)] == [key]
    assert os.stat(metadata).st_mtime_ns == written
    assert len(model.getHistory()["loss"]) == 1


def test_fit_on_parquet(class_df, fitted):
    est, _, store, _ = fitted
    (dataset_dir,) = store.list(store.get_intermediate_data_path())
    model = est.copy({est.epochs: 2, est.verbose: 0, est.validation: None}).fit_on_parquet(dataset_dir)
    history = model.getHistory()
    assert len(history["loss"]) == 2 and "val_loss" in history  # val/ of the prepared dataset
    assert _accuracy(model.transform(class_df)) > 0.8
    with pytest.raises(ValueError, match="not a directory in the store"):
        est.copy({est.validation: None}).fit_on_parquet("no/such/dir")


# -- persistence and Pipeline ---------------------------------------------------------------------

def _outputs(df, col):
    return np.array([r[col] for r in df.orderBy("arr").select(col).collect()])


def test_save_load_round_trip(spark, class_df, fitted, tmp_path):
    _, model, _, _ = fitted
    path = str(tmp_path / "torch_model")
    model.write().overwrite().save(path)
    model.write().overwrite().save(path)  # overwrite an existing save
    loaded = TorchModel.load(path)
    assert loaded.uid == model.uid
    assert loaded.getHistory() == model.getHistory()
    assert loaded.getFeatureCols() == ["vec", "arr"] and loaded.getLabelCols() == ["label"]
    assert loaded.getOutputShapes() == [[CLASSES]]
    np.testing.assert_array_equal(_outputs(loaded.transform(class_df), "label__output"),
                                  _outputs(model.transform(class_df), "label__output"))
    with pytest.raises(Exception, match="already exists"):
        model.write().save(path)


def test_model_built_directly_probes_output_shape(spark, class_df, fitted):
    _, model, _, _ = fitted
    direct = TorchModel(model=model.getModel(), feature_cols=["vec", "arr"], output_cols=["scores"])
    pred = direct.transform(class_df)
    assert direct.getOutputShapes() == [[CLASSES]]
    np.testing.assert_array_equal(_outputs(pred, "scores"), _outputs(model.transform(class_df), "label__output"))
    with pytest.raises(ValueError, match="already exist"):
        direct.transform(pred)
    # A null vector reaches the model's UDF as null, which names the column (not a JVM error).
    holed = class_df.withColumn("vec", F.when(F.col("label") == 1, None).otherwise(F.col("vec")))
    with pytest.raises(Exception, match=r"null rows in feature column 'vec'"):
        model.transform(holed).write.format("noop").mode("overwrite").save()


def test_pipeline_with_estimator_stage_save_and_load(spark, tmp_path):
    rows = _classification_rows(400, seed=5)
    flat = [tuple(r[0].toArray().tolist()) + tuple(r[1]) + (r[2],) for r in rows]
    cols = ["f%d" % i for i in range(8)]
    df = spark.createDataFrame(flat, cols + ["label"])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, CLASSES))
    est = TorchEstimator(num_proc=NUM_PROC, model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.03),
                         loss=torch.nn.functional.cross_entropy, feature_cols=["features"], label_cols=["label"],
                         batch_size=32, epochs=5, random_seed=3, store=Store.create(str(tmp_path / "store")),
                         verbose=0)
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=cols, outputCol="features"), est])
    fitted_pipeline = pipeline.fit(df)
    assert isinstance(fitted_pipeline.stages[-1], TorchModel)
    pred = fitted_pipeline.transform(df)
    rows_out = pred.select("label__output", "label").collect()
    accuracy = np.mean([np.argmax(r["label__output"]) == r["label"] for r in rows_out])
    assert accuracy > 0.85

    path = str(tmp_path / "pipeline_model")
    fitted_pipeline.write().overwrite().save(path)
    loaded = PipelineModel.load(path)
    assert isinstance(loaded.stages[-1], TorchModel)
    np.testing.assert_array_equal(
        np.array([r["label__output"] for r in loaded.transform(df).orderBy("f0").collect()]),
        np.array([r["label__output"] for r in pred.orderBy("f0").collect()]))


# -- checkpoints and resume ---------------------------------------------------------------------

def test_resume_after_failure_in_epoch_two(spark, class_df, tmp_path, capsys):
    store = Store.create(str(tmp_path / "store"))
    marker = tmp_path / "fail-marker"
    marker.write_text("fail while this file exists")
    torch.manual_seed(0)
    net = TwoInputNet()
    est = _classifier_estimator(store, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                                epochs=3, run_id="resumable", callbacks=[FailInEpoch(str(marker), epoch=1)])
    with pytest.raises(RankFailedError, match="injected failure in epoch 2"):
        est.fit(class_df)
    checkpoints = store.list(store.get_checkpoint_path("resumable"))
    assert [posixpath.basename(p) for p in checkpoints] == ["epoch-00001.ckpt"]

    marker.unlink()
    capsys.readouterr()
    resumed = est.fit(class_df)
    out = capsys.readouterr().out
    assert "resuming after epoch 1" in out
    assert "epoch 1/3 - " not in out and "epoch 2/3 - " in out and "epoch 3/3 - " in out
    assert len(resumed.getHistory()["loss"]) == 3
    assert [posixpath.basename(p) for p in store.list(store.get_checkpoint_path("resumable"))] == \
        ["epoch-00002.ckpt", "epoch-00003.ckpt"]

    # The same fit without the interruption ends with the same model and history.
    uninterrupted = est.copy({est.run_id: "straight", est.callbacks: []}).fit(class_df)
    for name, values in uninterrupted.getHistory().items():
        np.testing.assert_allclose(resumed.getHistory()[name], values, rtol=1e-5, atol=1e-6)
    for a, b in zip(resumed.getModel().state_dict().values(), uninterrupted.getModel().state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

    # A finished run fitted again trains nothing more and returns the same model.
    again = est.fit(class_df)
    assert again.getHistory() == resumed.getHistory()
    for a, b in zip(again.getModel().state_dict().values(), resumed.getModel().state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    # The run id of a run with another optimizer is refused, before any Spark job.
    other = est.copy({est.optimizer: torch.optim.Adam(net.parameters(), lr=0.01)})
    with no_spark_job(spark.sparkContext):
        with pytest.raises(ValueError, match="run_id 'resumable' holds a run of a different model.*optimizer_class"):
            other.fit(class_df)


def test_model_that_rejects_its_inputs_names_them_and_its_run_id_can_be_reused(spark, class_df, tmp_path):
    store = Store.create(str(tmp_path / "store"))
    torch.manual_seed(0)
    wrong = TwoInputNet(vec_dim=5)  # the vector column has 4 values per row
    est = _classifier_estimator(store, model=wrong, optimizer=torch.optim.SGD(wrong.parameters(), lr=0.1),
                                epochs=1, run_id="first-try")
    with pytest.raises(Exception) as info:
        est.fit(class_df)
    message = str(info.value)
    assert "the model failed on a batch of its inputs ('vec': (32, 4) float32, 'arr': (32, 4) float32" in message
    assert "mat1 and mat2 shapes cannot be multiplied" in message
    # Nothing was trained under that run_id, so the corrected model may use it.
    right = TwoInputNet()
    fixed = est.copy({est.model: right, est.optimizer: torch.optim.SGD(right.parameters(), lr=0.1)})
    assert len(fixed.fit(class_df).getHistory()["loss"]) == 1


# -- progress channel (no Spark) -------------------------------------------------------------------

class _FakeBar:
    bars = []

    def __init__(self, total, desc, **kwargs):
        self.total, self.desc, self.n, self.closed, self.postfix = total, desc, 0, False, None
        _FakeBar.bars.append(self)

    def update(self, k):
        self.n += k

    def set_postfix(self, values, refresh=True):
        self.postfix = values

    def close(self):
        self.closed = True


def test_progress_events_become_bar_and_epoch_lines_other_output_passes_through():
    import io

    from horovod_spark.estimator.common.progress_driver import ProgressPrinter
    from horovod_spark.estimator.common.progress_rank import ProgressReporter

    rank_out = io.StringIO()
    reporter = ProgressReporter(True, interval=3600, out=rank_out)
    reporter.train_begin(epochs=2, start_epoch=0, steps_per_epoch=10, val_steps=0, run_id="r")
    for step in range(1, 11):
        reporter.step(0, step, {"loss": 1.0 / step})  # throttled: only the first gets through
    reporter.epoch_end(0, {"loss": 0.5, "accuracy": 0.75}, 1.25)
    reporter.train_end()
    events = rank_out.getvalue().splitlines()
    assert len(events) == 4

    driver_out = io.StringIO()
    _FakeBar.bars = []
    printer = ProgressPrinter(verbose=1, out=driver_out, bar_factory=_FakeBar)
    # As the runner writes them: prefixed lines, and a chunk may end mid-line.
    text = "".join("[0]<stdout>:%s\n" % e for e in events[:2]) + "[1]<stdout>:hello from rank 1\n"
    text += "".join("[0]<stdout>:%s\n" % e for e in events[2:])
    printer.write(text[:37])
    printer.write(text[37:])
    printer.close()
    lines = driver_out.getvalue().splitlines()
    assert lines == ["[1]<stdout>:hello from rank 1",
                     "epoch 1/2 - loss: 0.5000 - accuracy: 0.7500 - 1.2s"]
    (bar,) = _FakeBar.bars
    assert bar.total == 10 and bar.desc == "epoch 1/2" and bar.n == 1 and bar.closed
    assert printer.epoch_logs == [{"epoch": 0, "logs": {"loss": 0.5, "accuracy": 0.75}, "seconds": 1.25}]

    quiet = io.StringIO()
    silent = ProgressPrinter(verbose=0, out=quiet, bar_factory=_FakeBar)
    silent.write("".join("[0]<stdout>:%s\n" % e for e in events))
    assert quiet.getvalue() == "" and len(_FakeBar.bars) == 1
