"""TorchEstimator as a Spark ML citizen, written as user code: the estimator saves and loads (alone and
in a Pipeline) and fits the same; prediction columns follow the label column's type as in Horovod;
Spark ML's classifier columns feed Spark's evaluators; CrossValidator and TrainValidationSplit choose
by an evaluator with several fits at once, and save and load their best model; sample weights with a
mean-reducing loss are Horovod's weighted mean."""
import sys
import time

import cloudpickle
import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

from pyspark.ml import Pipeline  # noqa: E402
from pyspark.ml.evaluation import BinaryClassificationEvaluator, MulticlassClassificationEvaluator  # noqa: E402
from pyspark.ml.linalg import Vectors, VectorUDT  # noqa: E402
from pyspark.ml.tuning import (  # noqa: E402
    CrossValidator,
    CrossValidatorModel,
    ParamGridBuilder,
    TrainValidationSplit,
    TrainValidationSplitModel,
)
from pyspark.sql import types as T  # noqa: E402

from horovod_spark.estimator import TorchEstimator, TorchModel  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = [pytest.mark.timeout(600), pytest.mark.legacy_stack]

CLASSES = 3

# The model classes and callbacks below travel by value, as a notebook's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class TrainingTimes:
    """Appends "<start> <end>" of each fit's training to a file (which fits overlapped), the training
    lasting at least ``hold`` seconds (as a real one would, longer than its ranks take to start)."""

    def __init__(self, path, hold=0.0):
        self.path, self.hold, self.started = path, hold, None

    def on_train_begin(self, rank, size):
        self.rank, self.started = rank, time.time()
        time.sleep(self.hold)

    def on_train_end(self, history):
        if self.rank != 0:
            return
        with open(self.path, "a") as f:
            f.write("%f %f\n" % (self.started, time.time()))


class Heads(torch.nn.Module):
    """One linear head per label column, of the given widths."""

    def __init__(self, *widths):
        super().__init__()
        self.heads = torch.nn.ModuleList([torch.nn.Linear(4, w) for w in widths])

    def forward(self, x):
        return tuple(head(x) for head in self.heads)


@pytest.fixture(scope="module")
def df(spark):
    """400 rows: a 4-vector of features, a class label (argmax of a linear map), the same as a
    two-value vector label (is it class 0?), a small integer count, a double target and a weight."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 4))
    label = (x @ np.random.default_rng(1).normal(size=(4, CLASSES))).argmax(axis=1)
    rows = [(Vectors.dense(x[i].tolist()), int(label[i]), Vectors.dense([float(label[i] == 0), float(label[i] != 0)]),
             i % 4, float(x[i].sum()), 1.0 + i % 3) for i in range(len(x))]
    schema = T.StructType([T.StructField("features", VectorUDT()), T.StructField("label", T.IntegerType()),
                           T.StructField("pair", VectorUDT()), T.StructField("count", T.IntegerType()),
                           T.StructField("target", T.DoubleType()),
                           T.StructField("weight", T.DoubleType())])
    return spark.createDataFrame(rows, schema).coalesce(2).cache()


def classifier(store, **overrides):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, CLASSES))
    params = dict(num_proc=1, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.5),
                  loss=torch.nn.functional.cross_entropy, feature_cols=["features"], label_cols=["label"],
                  batch_size=16, epochs=1, random_seed=5, store=store, verbose=0, use_gpu=False)
    params.update(overrides)
    return TorchEstimator(**params)


# -- save and load -------------------------------------------------------------------------------------

def test_estimator_saves_loads_alone_and_in_a_pipeline_and_fits_the_same(spark, df, tmp_path):
    store = Store.create(str(tmp_path / "store"))
    est = classifier(store, num_proc=2, metrics=["accuracy"], validation=0.25,
                     callbacks=[TrainingTimes(str(tmp_path / "times"))])
    path = str(tmp_path / "estimator")
    est.save(path)
    est.write().overwrite().save(path)
    with pytest.raises(Exception, match="already exists"):
        est.save(path)

    loaded = TorchEstimator.load(path)
    assert loaded.uid == est.uid
    for name in ("num_proc", "feature_cols", "label_cols", "batch_size", "epochs", "random_seed", "metrics",
                 "validation", "verbose", "use_gpu"):
        assert loaded.getOrDefault(name) == est.getOrDefault(name), name
    assert loaded.getStore() == store and loaded.getLoss() is torch.nn.functional.cross_entropy
    assert isinstance(loaded.getCallbacks()[0], TrainingTimes)
    optimizer, model = loaded.getOptimizer(), loaded.getModel()
    assert type(optimizer) is torch.optim.SGD and optimizer.defaults["momentum"] == 0.5
    # The optimizer holds the loaded model's own parameters, as the saved one held the saved model's.
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}
    for mine, theirs in zip(model.parameters(), est.getModel().parameters()):
        assert torch.equal(mine, theirs)

    pipeline_path = str(tmp_path / "pipeline")
    Pipeline(stages=[est]).save(pipeline_path)
    refit = Pipeline.load(pipeline_path).fit(df).stages[-1]
    original = est.fit(df)
    assert isinstance(refit, TorchModel)
    assert refit.getHistory().keys() == original.getHistory().keys()
    for name, values in original.getHistory().items():
        assert refit.getHistory()[name] == pytest.approx(values), name


# -- prediction column types --------------------------------------------------------------------------

def test_prediction_columns_follow_the_label_types(spark, df, tmp_path):
    torch.manual_seed(0)
    net = Heads(CLASSES, 2, 1)
    mse = torch.nn.functional.mse_loss
    model = TorchEstimator(num_proc=1, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.05),
                           loss=[torch.nn.functional.cross_entropy, mse, mse], feature_cols=["features"],
                           label_cols=["label", "pair", "count"], epochs=1, verbose=0,
                           store=Store.create(str(tmp_path)), use_gpu=False).fit(df)
    assert model.getLabelTypes() == ["int", "array", "int"]
    pred = model.transform(df)
    # A scalar label with several outputs per row, and a vector label: vectors, as Horovod's TorchModel.
    assert isinstance(pred.schema["label__output"].dataType, VectorUDT)
    assert isinstance(pred.schema["pair__output"].dataType, VectorUDT)
    # A one-value output takes its label's scalar type: an integer label's prediction is rounded.
    assert pred.schema["count__output"].dataType == T.IntegerType()
    row = pred.first()
    scores, pair, count = model.getModel()(torch.tensor(row.features.toArray()[None], dtype=torch.float32))
    np.testing.assert_allclose(row.label__output.toArray(), scores[0].detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(row.pair__output.toArray(), pair[0].detach().numpy(), rtol=1e-6)
    assert row.count__output == round(count.item())

    # A model built around a trained network takes the label types from the DataFrame it transforms.
    direct = TorchModel(model=model.getModel(), feature_cols=["features"], label_cols=["label", "pair", "target"])
    assert direct.transform(df).schema["target__output"].dataType == T.DoubleType()


# -- Spark ML's classifier columns and evaluators -------------------------------------------------------

def test_binary_classifier_columns_feed_spark_evaluators(spark, df, tmp_path):
    """One logit per row: the columns Spark's LogisticRegression gives a binary classifier."""
    binary = df.selectExpr("features", "cast(label = 0 as double) as is_zero")
    torch.manual_seed(0)
    line = torch.nn.Linear(4, 1)
    model = TorchEstimator(num_proc=1, model=line, optimizer=torch.optim.SGD(line.parameters(), lr=0.3),
                           loss=torch.nn.functional.binary_cross_entropy_with_logits, feature_cols=["features"],
                           label_cols=["is_zero"], epochs=3, batch_size=16, classification="logits", verbose=0,
                           store=Store.create(str(tmp_path)), use_gpu=False).fit(binary)
    pred = model.transform(binary)
    assert pred.columns[-4:] == ["is_zero__output", "rawPrediction", "probability", "prediction"]
    row = pred.first()
    z = row.is_zero__output
    np.testing.assert_allclose(row.rawPrediction.toArray(), [-z, z], rtol=1e-6)
    np.testing.assert_allclose(row.probability.toArray(), [1 / (1 + np.exp(z)), 1 / (1 + np.exp(-z))], rtol=1e-6)
    assert row.prediction == float(z > 0)
    assert BinaryClassificationEvaluator(labelCol="is_zero").evaluate(pred) > 0.8
    assert MulticlassClassificationEvaluator(labelCol="is_zero", metricName="accuracy").evaluate(pred) > 0.7
    with pytest.raises(ValueError, match="classification='scores'"):
        model.copy().setClassification("scores").transform(binary)
    with pytest.raises(ValueError, match=r"output column\(s\) \['prediction'\] already exist"):
        model.transform(pred.drop("is_zero__output", "rawPrediction", "probability"))


# -- tuning ---------------------------------------------------------------------------------------------

def _intervals(path):
    with open(path) as f:
        return sorted(tuple(map(float, line.split())) for line in f)


def _overlapping(intervals):
    return any(b[0] < a[1] for a, b in zip(intervals, intervals[1:]))


def test_cross_validator_fits_at_once_chooses_saves_and_loads(spark, df, tmp_path):
    """parallelism=2 with num_proc=1 on two task slots: two fits train at once."""
    times = str(tmp_path / "times")
    est = classifier(Store.create(str(tmp_path / "store")), classification="logits",
                     callbacks=[TrainingTimes(times, hold=3.0)])
    grid = ParamGridBuilder().addGrid(est.batch_size, [4, 128]).build()
    cv = CrossValidator(estimator=est, estimatorParamMaps=grid, numFolds=2, parallelism=2, seed=1,
                        evaluator=MulticlassClassificationEvaluator(metricName="accuracy"))
    cv_path = str(tmp_path / "cv")
    cv.save(cv_path)
    loaded_cv = CrossValidator.load(cv_path)
    assert [m[loaded_cv.getEstimator().batch_size] for m in loaded_cv.getEstimatorParamMaps()] == [4, 128]

    cv_model = cv.fit(df)
    assert _overlapping(_intervals(times))
    best = int(np.argmax(cv_model.avgMetrics))
    assert cv_model.avgMetrics[0] > cv_model.avgMetrics[1]  # 100 steps of 4 rows beat 2 of 128
    # The best model carries the Params of the fit that made it.
    assert cv_model.bestModel.getFitParams()["batch_size"] == grid[best][est.batch_size] == 4
    path = str(tmp_path / "cv_model")
    cv_model.write().overwrite().save(path)
    loaded = CrossValidatorModel.load(path)
    assert isinstance(loaded.bestModel, TorchModel) and loaded.bestModel.getFitParams()["batch_size"] == 4
    evaluator = MulticlassClassificationEvaluator(metricName="accuracy")
    pred = loaded.transform(df)
    assert evaluator.evaluate(pred) == evaluator.evaluate(cv_model.transform(df)) > 0.7
    # Class scores: rawPrediction is the output, probability its softmax, prediction its argmax.
    assert pred.columns[-4:] == ["label__output", "rawPrediction", "probability", "prediction"]
    row = pred.first()
    scores = row.label__output.toArray()
    np.testing.assert_allclose(row.rawPrediction.toArray(), scores, rtol=1e-6)
    np.testing.assert_allclose(row.probability.toArray(), np.exp(scores) / np.exp(scores).sum(), rtol=1e-6)
    assert row.prediction == float(np.argmax(scores))


def test_train_validation_split_whose_fits_exceed_the_slots_waits_its_turn(spark, df, tmp_path):
    """parallelism=2 with num_proc=2 on two task slots: the fits take turns, none deadlocks. (Where
    the second one waits, at the slot gate or, on pyspark 3.5, for its data preparation's Spark job,
    depends on the scheduler; tests/estimator/test_slot_gate.py covers the gate itself.)"""
    times = str(tmp_path / "times")
    est = classifier(Store.create(str(tmp_path / "store")), num_proc=2, classification="logits", verbose=1,
                     callbacks=[TrainingTimes(times)])
    grid = ParamGridBuilder().addGrid(est.batch_size, [4, 128]).build()
    tvs = TrainValidationSplit(estimator=est, estimatorParamMaps=grid, parallelism=2, seed=1, trainRatio=0.75,
                               evaluator=MulticlassClassificationEvaluator(metricName="accuracy"))
    tvs_model = tvs.fit(df)
    intervals = _intervals(times)
    assert len(intervals) == 3 and not _overlapping(intervals)
    assert tvs_model.bestModel.getFitParams()["batch_size"] == 4
    path = str(tmp_path / "tvs_model")
    tvs_model.save(path)
    assert TrainValidationSplitModel.load(path).bestModel.getFitParams()["num_proc"] == 2


# -- sample weights -------------------------------------------------------------------------------------

def test_sample_weights_with_mean_reducing_losses_are_horovods_weighted_mean(spark, df, tmp_path):
    """A torch.nn.functional loss and a torch.nn loss module, both reducing to the mean by default.
    With lr=0 an epoch's loss is the untrained model's: the mean over rows of weight * squared error."""
    rows = df.select("features", "target", "count", "weight").collect()
    x = torch.tensor(np.array([r.features.toArray() for r in rows]), dtype=torch.float32)
    w = torch.tensor([r.weight for r in rows], dtype=torch.float32)
    torch.manual_seed(0)
    net = Heads(1, 1)
    expected = [float(((out.reshape(-1) - torch.tensor([r[col] for r in rows], dtype=torch.float32)).pow(2) * w).mean())
                for out, col in zip(net(x), ["target", "count"])]
    est = TorchEstimator(num_proc=1, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.0),
                         loss=[torch.nn.functional.mse_loss, torch.nn.MSELoss()], feature_cols=["features"],
                         label_cols=["target", "count"], sample_weight_col="weight", batch_size=len(rows), epochs=1,
                         shuffle=False, verbose=0, use_gpu=False, store=Store.create(str(tmp_path)))
    history = est.fit(df).getHistory()
    assert history["target_loss"][0] == pytest.approx(expected[0], rel=1e-5)
    assert history["count_loss"][0] == pytest.approx(expected[1], rel=1e-5)
