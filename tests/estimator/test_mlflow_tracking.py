"""MLflow tracking of fits against a real tracking server (``mlflow server``, SQLite backend, local
artifacts): one tracked fit per framework inside an active MLflow run, its Params, per-epoch metrics,
tags and pyfunc model (which predicts what transform() appends); no tracking without an active run;
an unreachable server costs one warning and no time. Lightning's own MLFlowLogger keeps working."""
import logging
import socket
import sys
import time

import cloudpickle
import numpy as np
import pytest
from support.mlflow_server import MlflowServer

mlflow = pytest.importorskip("mlflow")
torch = pytest.importorskip("torch")

from mlflow import MlflowClient  # noqa: E402

from horovod_spark.estimator import KerasEstimator, LightningEstimator, TorchEstimator  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(600)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FEATURES = 6
EPOCHS = 2
ROWS = 120
COMMON = dict(num_proc=2, feature_cols=["features"], label_cols=["label"], validation=0.25, batch_size=16,
              epochs=EPOCHS, random_seed=0, verbose=0)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The tracking server, started before the SparkSession so that both start up together."""
    server = MlflowServer(str(tmp_path_factory.mktemp("mlflow")))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tracking_uri(server, spark):
    uri = server.wait()
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        yield uri
    finally:
        mlflow.set_tracking_uri(previous)


@pytest.fixture(scope="module")
def frame(spark):
    from pyspark.ml.linalg import Vectors
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES))
    labels = (x[:, 0] + 0.5 * x[:, 1] - x[:, 2] > 0).astype(int)
    df = spark.createDataFrame([(Vectors.dense(r.tolist()), int(label)) for r, label in zip(x, labels)],
                               ["features", "label"]).repartition(2).cache()
    df.count()
    return df


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return Store.create(str(tmp_path_factory.mktemp("store")))


def _torch_estimator(store, run_id, **params):
    torch.manual_seed(0)
    net = torch.nn.Linear(FEATURES, 2)
    return TorchEstimator(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                          loss=torch.nn.functional.cross_entropy, metrics=["accuracy"], store=store, run_id=run_id,
                          classification="logits",
                          **dict(COMMON, **params))


def _keras_estimator(store, run_id):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return KerasEstimator(model=model, store=store, run_id=run_id, **COMMON)


def _lightning_estimator(store, run_id, tracking_uri):
    from lightning.pytorch.loggers import MLFlowLogger
    from support import lightning_estimator_models as models
    cloudpickle.register_pickle_by_value(models)
    torch.manual_seed(0)
    logger = MLFlowLogger(experiment_name="lightning-own-logger", tracking_uri=tracking_uri)
    return LightningEstimator(model=models.Classifier(), store=store, run_id=run_id, logger=logger, **COMMON)


@pytest.fixture(scope="module", params=["torch", "keras", "lightning"])
def tracked(request, server, frame, store, tracking_uri):
    """(framework, MLflow run id, our run_id, fitted model): one fit inside an active MLflow run."""
    framework = request.param
    run_id = "tracked-%s" % framework
    est = {"torch": lambda: _torch_estimator(store, run_id), "keras": lambda: _keras_estimator(store, run_id),
           "lightning": lambda: _lightning_estimator(store, run_id, tracking_uri)}[framework]()
    with mlflow.start_run(run_name="user-run-%s" % framework) as run:
        model = est.fit(frame)
        if framework == "torch":   # a second fit in the same run: a nested run of its own
            _torch_estimator(store, "tracked-torch-again", epochs=1).fit(frame)
    return framework, run.info.run_id, run_id, model


def test_a_fit_in_an_active_run_logs_params_epoch_metrics_and_tags(tracked):
    framework, mlflow_run_id, run_id, model = tracked
    client = MlflowClient()
    run = client.get_run(mlflow_run_id)
    assert run.data.params["epochs"] == str(EPOCHS)
    assert run.data.params["batch_size"] == "16"
    assert run.data.params["feature_cols"] == "['features']"
    assert run.data.params["mlflow_tracking"] == "auto"
    tags = run.data.tags
    assert tags["horovod_spark.run_id"] == run_id
    assert tags["horovod_spark.num_proc"] == "2"
    assert tags["horovod_spark.store"]
    assert "horovod_spark.version.horovod_spark" in tags and "horovod_spark.version.pyspark" in tags
    assert "horovod_spark.version.%s" % {"keras": "tensorflow"}.get(framework, "torch") in tags
    history = model.getHistory()
    expected = {"loss", "val_loss"} if framework != "lightning" else {"train_loss", "val_loss", "val_acc"}
    assert expected <= set(history)
    for name in expected:
        logged = client.get_metric_history(mlflow_run_id, name)
        assert sorted(m.step for m in logged) == list(range(EPOCHS)), name
        logged = sorted(logged, key=lambda m: m.step)
        assert np.allclose([m.value for m in logged], history[name])
        # Logged as each epoch reached the driver, not all at once when the fit returned.
        assert logged[0].timestamp < logged[1].timestamp, name
    if framework == "lightning":
        # The user's own MLFlowLogger logged from rank 0 into a run of its own.
        experiment = client.get_experiment_by_name("lightning-own-logger")
        runs = client.search_runs([experiment.experiment_id])
        assert len(runs) == 1
        assert {"train_loss", "val_loss"} <= set(runs[0].data.metrics)


def test_the_logged_model_predicts_what_transform_appends(tracked, frame):
    framework, mlflow_run_id, _, model = tracked
    loaded = mlflow.pyfunc.load_model("runs:/%s/model" % mlflow_run_id)
    rows = frame.limit(20)
    expected = model.transform(rows).toPandas()
    predicted = loaded.predict(expected[["features"]])
    output = model.resolved_output_cols()[0]
    assert np.allclose(np.stack(predicted[output]), np.stack([v.toArray() for v in expected[output]]), atol=1e-6)
    if framework == "torch":   # classification="logits": Spark ML's classifier columns too
        assert np.array_equal(predicted["prediction"].to_numpy(), expected["prediction"].to_numpy())
        assert np.allclose(np.stack(predicted["probability"]), np.stack([v.toArray() for v in expected["probability"]]))


def test_the_model_logs_without_mlflow_warnings_about_our_wrapper(tracked, tracking_uri, caplog):
    """MLflow warns about a PythonModel without type hints (at class creation, once per process) and
    about a signature it cannot infer (when logging): neither is the user's doing, so neither shows."""
    framework, _, _, model = tracked
    if framework != "torch":
        pytest.skip("one framework is enough: the wrapper is shared")
    import subprocess
    out = subprocess.run([sys.executable, "-W", "always", "-c",
                          "import horovod_spark.estimator.common.mlflow_pyfunc"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "type hint" not in out.stderr.lower(), out.stderr
    from horovod_spark.estimator.common import mlflow_pyfunc
    saved = mlflow_pyfunc.save_for_pyfunc(model)
    try:
        with caplog.at_level(logging.INFO), mlflow.start_run(run_name="wrapper-only") as run:
            mlflow_pyfunc.log_pyfunc(run.info.run_id, saved, framework)
    finally:
        saved.cleanup()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert mlflow.pyfunc.load_model("runs:/%s/model" % run.info.run_id) is not None


def test_a_second_fit_in_the_same_run_logs_into_a_nested_run(tracked):
    framework, mlflow_run_id, *_ = tracked
    if framework != "torch":
        pytest.skip("one framework is enough: the run handling is shared")
    client = MlflowClient()
    parent = client.get_run(mlflow_run_id)
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string="tags.mlflow.parentRunId = '%s'" % mlflow_run_id)
    assert [c.info.run_name for c in children] == ["tracked-torch-again"]
    child = children[0]
    assert child.info.status == "FINISHED"
    assert child.data.params["epochs"] == "1" and parent.data.params["epochs"] == str(EPOCHS)
    assert child.data.tags["horovod_spark.run_id"] == "tracked-torch-again"
    assert [m.step for m in client.get_metric_history(child.info.run_id, "loss")] == [0]


def _closed_port_uri():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d" % s.getsockname()[1]


def test_no_run_no_tracking_and_an_unreachable_server_costs_one_warning(server, frame, store, tracking_uri, caplog):
    client = MlflowClient()
    before = {r.info.run_id for r in client.search_runs([e.experiment_id for e in client.search_experiments()])}
    started = time.monotonic()
    _torch_estimator(store, "untracked").fit(frame)
    untracked_seconds = time.monotonic() - started
    after = {r.info.run_id for r in client.search_runs([e.experiment_id for e in client.search_experiments()])}
    assert after == before

    mlflow.set_tracking_uri(_closed_port_uri())
    try:
        with caplog.at_level(logging.WARNING, logger="horovod_spark"):
            started = time.monotonic()
            _torch_estimator(store, "unreachable", mlflow_tracking=True).fit(frame)
            unreachable_seconds = time.monotonic() - started
    finally:
        mlflow.set_tracking_uri(tracking_uri)
    warnings = [r for r in caplog.records if r.name.startswith("horovod_spark") and r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "cannot be reached" in warnings[0].getMessage(), warnings
    assert unreachable_seconds < untracked_seconds * 1.5 + 5, (unreachable_seconds, untracked_seconds)


def test_tracking_asked_for_without_mlflow_installed_fails_before_any_spark_job(frame, store, monkeypatch):
    # None in sys.modules makes `import mlflow` raise ImportError, as where MLflow is not installed.
    monkeypatch.setitem(sys.modules, "mlflow", None)
    jobs = frame.sparkSession.sparkContext.statusTracker().getJobIdsForGroup()
    with pytest.raises(ValueError, match=r"pip install horovod-spark\[mlflow\]"):
        _torch_estimator(store, "no-mlflow", mlflow_tracking=True).fit(frame)
    assert frame.sparkSession.sparkContext.statusTracker().getJobIdsForGroup() == jobs
