"""Horovod's estimator Params backend=, backend_env= and inmemory_cache_all= on one local[2] SparkSession:
real two-epoch fits of both estimators, cached and not, with the same results; ranks run through
SparkBackend (its env reaches them) or through a backend of the user's own; the checks before any job."""
import contextlib
import os
import re
import sys
import uuid

import cloudpickle
import numpy as np
import pytest
from support.keras_data import classification_df, two_input_model

import horovod_spark

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")

from horovod_spark.estimator import KerasEstimator, TorchEstimator  # noqa: E402
from horovod_spark.spark.backend import Backend, SparkBackend  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(600)

NUM_PROC = 2
EPOCHS = 2

# Callbacks, models and the backend below travel by value, as a notebook's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class TwoInputNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

    def forward(self, vec, arr):
        return self.body(torch.cat([vec, arr], dim=1))


class PrintEnv:
    """A Torch-estimator callback: each rank prints the variable as its environment has it."""

    def on_train_begin(self, rank, size):
        print("rank %d sees HS_BACKEND_TEST=%s" % (rank, os.environ.get("HS_BACKEND_TEST")), flush=True)


class KerasPrintEnv(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        import horovod_spark.keras as hvd
        print("rank %d sees HS_BACKEND_TEST=%s" % (hvd.rank(), os.environ.get("HS_BACKEND_TEST")), flush=True)


class RecordingBackend(Backend):
    """A backend of the user's own (Horovod's Backend interface): runs the ranks with horovod_spark.run
    and remembers the environment each run was given."""

    def __init__(self, num_proc):
        self.num_proc, self.envs = num_proc, []

    def num_processes(self):
        return self.num_proc

    def run(self, fn, args=(), kwargs=None, env=None):
        self.envs.append(dict(env))
        return horovod_spark.run(fn, args=args, kwargs=kwargs, num_proc=self.num_proc, env=env, verbose=0)


@pytest.fixture(scope="module")
def spark_master():
    return "local[%d]" % NUM_PROC


@pytest.fixture(scope="module")
def class_df(spark):
    return classification_df(spark, n=400).cache()


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


def _cache_lines(printed):
    """{(rank, 'training'|'validation'): (cached, read from files, served from memory)}."""
    found = {}
    for rank, what, cached, reads, hits in re.findall(
            r"\[\d+\]<stdout>:inmemory_cache_all: rank (\d+) (\w+) data: (\d+) row group\(s\) cached in memory "
            r"\([\d.]+ MiB\); (\d+) read from files, (\d+) served from memory", printed):
        found[(int(rank), what)] = (int(cached), int(reads), int(hits))
    return found


def _assert_second_epoch_came_from_memory(printed):
    lines = _cache_lines(printed)
    assert set(lines) == {(r, w) for r in range(NUM_PROC) for w in ("training", "validation")}, printed
    for (rank, what), (cached, reads, hits) in lines.items():
        # shuffle=False: every epoch reads the same row groups, so epoch 2 (and the second validation)
        # takes from memory exactly what epoch 1 read from the files.
        assert cached == reads > 0 and hits == reads, (rank, what, cached, reads, hits)
    assert "did not fit" not in printed


def _torch_estimator(store, **kw):
    torch.manual_seed(0)
    net = TwoInputNet()
    return TorchEstimator(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                          loss=torch.nn.functional.cross_entropy, feature_cols=["vec", "arr"], label_cols=["label"],
                          batch_size=16, epochs=EPOCHS, shuffle=False, validation=0.25, random_seed=11, store=store,
                          **kw)


def test_torch_fit_through_spark_backend_with_inmemory_cache_matches_one_without(spark, class_df, tmp_path, capsys):
    store = Store.create(str(tmp_path / "store"))
    reference_backend = RecordingBackend(NUM_PROC)
    reference = _torch_estimator(store, backend=reference_backend, verbose=0).fit(class_df)
    assert reference_backend.envs and reference_backend.envs[0] == {}
    capsys.readouterr()

    backend = SparkBackend(num_proc=NUM_PROC, env={"HS_BACKEND_TEST": "from-backend"}, start_timeout=120)
    est = _torch_estimator(store, backend=backend, inmemory_cache_all=True, verbose=2, callbacks=[PrintEnv()])
    assert est.getInMemoryCacheAll() is True and est.getBackend() is backend
    cached = est.fit(class_df)
    printed = capsys.readouterr().out
    _assert_second_epoch_came_from_memory(printed)
    for rank in range(NUM_PROC):
        assert "rank %d sees HS_BACKEND_TEST=from-backend" % rank in printed
    assert "epoch 2/2" in printed  # the driver's progress lines still print through a SparkBackend

    history, expected = cached.getHistory(), reference.getHistory()
    assert set(history) == set(expected) and len(history["loss"]) == EPOCHS
    for name in expected:
        np.testing.assert_allclose(history[name], expected[name], rtol=1e-5, err_msg=name)
    for a, b in zip(cached.getModel().state_dict().values(), reference.getModel().state_dict().values()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


def test_keras_fit_with_inmemory_cache_and_backend_env_matches_one_without(spark, class_df, tmp_path, capsys):
    store = Store.create(str(tmp_path / "store"))
    common = dict(model=two_input_model(), feature_cols=["vec", "arr"], label_cols=["label"], batch_size=16,
                  epochs=EPOCHS, shuffle=False, validation=0.25, random_seed=11, store=store)
    reference = KerasEstimator(num_proc=NUM_PROC, verbose=0, **common).fit(class_df)
    capsys.readouterr()

    est = KerasEstimator(backend=SparkBackend(num_proc=NUM_PROC), inmemory_cache_all=True, verbose=2,
                         backend_env={"HS_BACKEND_TEST": "from-backend-env"}, callbacks=[KerasPrintEnv()], **common)
    cached = est.fit(class_df)
    printed = capsys.readouterr().out
    _assert_second_epoch_came_from_memory(printed)
    for rank in range(NUM_PROC):
        assert "rank %d sees HS_BACKEND_TEST=from-backend-env" % rank in printed

    history, expected = cached.getHistory(), reference.getHistory()
    assert set(history) == set(expected) and len(history["loss"]) == EPOCHS
    for name in expected:
        np.testing.assert_allclose(history[name], expected[name], rtol=1e-5, err_msg=name)
    for a, b in zip(cached.getModel().get_weights(), reference.getModel().get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_backend_and_cache_params_are_checked_before_any_spark_job(spark, class_df, tmp_path):
    store = Store.create(str(tmp_path / "store"))
    cases = [
        (dict(num_proc=3, backend=SparkBackend(num_proc=NUM_PROC)),
         r"num_proc=3 and backend=SparkBackend\(num_proc=2\) \(which runs 2 ranks\) disagree: pass only the backend"),
        (dict(backend="spark"), "backend='spark' is not a backend: pass horovod_spark.spark.common.backend"),
        (dict(backend=RecordingBackend(0)), r"backend.num_processes\(\) returned 0"),
    ]
    for params, message in cases:
        with no_spark_job(spark.sparkContext), pytest.raises(ValueError, match=message):
            _torch_estimator(store, **params).fit(class_df)
    with pytest.raises(ValueError, match="backend_env must be a dict"):
        with no_spark_job(spark.sparkContext):
            KerasEstimator(model=two_input_model(), feature_cols=["vec", "arr"], label_cols=["label"], store=store,
                           backend_env="A=1").fit(class_df)


def test_inmemory_cache_all_needs_the_arrow_reader():
    from horovod_spark.data.reader import _DATA_MODULES, register_data_module
    from horovod_spark.estimator.common.checks import check_common
    register_data_module("test-own-reader", "horovod_spark.data.arrow_reader:ArrowReader")
    try:
        est = _torch_estimator(Store.create("/tmp/unused-store"), inmemory_cache_all=True,
                               data_module="test-own-reader")
        with pytest.raises(ValueError, match="inmemory_cache_all=True needs data_module='arrow'"):
            check_common(est)
    finally:
        _DATA_MODULES.pop("test-own-reader")


def test_spark_backend_arguments():
    backend = SparkBackend(num_proc=3, env={"A": "1"}, verbose=2, start_timeout=30)
    assert backend.num_processes() == 3 and backend.env == {"A": "1"}
    assert backend.run_options == {"verbose": 2, "start_timeout": 30}
    with pytest.raises(TypeError, match=r"SparkBackend does not take num_slots=: its keyword arguments go to "
                                        r"horovod_spark.run, which takes .*start_timeout"):
        SparkBackend(num_proc=2, num_slots=2)
    with pytest.raises(ValueError, match=r"SparkBackend\(num_proc=0\): pass a positive number"):
        SparkBackend(num_proc=0)
    with pytest.raises(TypeError, match="takes a dict of environment variables"):
        SparkBackend(env=["A=1"])


def test_rank_environment_precedence():
    """Framework defaults < the SparkBackend's env < backend_env; without a backend, defaults < backend_env."""
    from horovod_spark.estimator.common import run_ranks
    defaults, user = {"TF_CPP_MIN_LOG_LEVEL": "2", "B": "default"}, {"A": "user"}
    runner = run_ranks.choose(SparkBackend(num_proc=2, env={"TF_CPP_MIN_LOG_LEVEL": "0", "A": "backend"}), None)
    assert runner.rank_env(defaults, user) == {"B": "default", "A": "user"}  # the backend adds its own env
    assert run_ranks.choose(None, 2).rank_env(defaults, user) == dict(defaults, A="user")
