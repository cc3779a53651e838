"""LightningEstimator refuses bad input before any Spark job (no SparkSession here at all): a model
that is not a lightning.pytorch.LightningModule, one without configure_optimizers or forward, feature
columns its forward cannot take, Horovod's Torch-only keywords, a Lightning release outside the
supported range, and Lightning missing. Also the Horovod import path and keywords."""
import inspect
import os
import subprocess
import sys

import pytest

import horovod_spark

pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from support import lightning_estimator_models as models  # noqa: E402

from horovod_spark.estimator import LightningEstimator  # noqa: E402
from horovod_spark.lightning import INSTALL_HINT  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))

# Horovod 0.28.1's horovod.spark.lightning.TorchEstimator keywords, with their defaults where set.
HOROVOD_KEYWORDS = (
    "num_proc model backend store optimizer loss loss_constructors metrics loss_weights sample_weight_col "
    "gradient_compression feature_cols input_shapes validation label_cols callbacks batch_size val_batch_size "
    "epochs verbose random_seed shuffle_buffer_size shuffle partitions_per_process run_id train_minibatch_fn "
    "train_steps_per_epoch validation_steps_per_epoch transformation_fn transformation_edit_fields "
    "transformation_removed_fields train_reader_num_workers trainer_args val_reader_num_workers reader_pool_type "
    "label_shapes inmemory_cache_all num_gpus logger log_every_n_steps data_module loader_num_epochs "
    "terminate_on_nan profiler debug_data_loader train_async_data_loader_queue_size "
    "val_async_data_loader_queue_size use_gpu mp_start_method").split()
HOROVOD_DEFAULTS = {"verbose": 1, "shuffle": True, "inmemory_cache_all": False, "log_every_n_steps": 50,
                    "terminate_on_nan": False, "debug_data_loader": False, "use_gpu": True}


class NoOptimizers(models.Classifier):
    configure_optimizers = pl.LightningModule.configure_optimizers


class NoForward(models.Classifier):
    forward = pl.LightningModule.forward


class TwoInputs(models.Classifier):
    def forward(self, a, b):
        return self.net(torch.cat([a, b], dim=1))


class TorchEstimatorCallback:
    """A callback of the plain TorchEstimator's kind."""

    def on_epoch_end(self, epoch, logs):
        pass


def _fit(tmp_path, **params):
    options = dict(num_proc=2, model=models.Classifier(), feature_cols=["features"], label_cols=["label"],
                   store=Store.create(str(tmp_path / "store")))
    options.update(params)
    # fit_on_parquet: the checks run before the (missing) Parquet is looked at, with no Spark job.
    return LightningEstimator(**options).fit_on_parquet(str(tmp_path / "no-such-data"))


def test_the_horovod_path_and_keywords():
    from horovod_spark.spark import lightning
    assert lightning.TorchEstimator is LightningEstimator
    assert lightning.TorchModel.__name__ == "LightningModel"
    parameters = inspect.signature(LightningEstimator).parameters
    missing = [k for k in HOROVOD_KEYWORDS if k not in parameters]
    assert not missing, missing
    for name, default in HOROVOD_DEFAULTS.items():
        assert parameters[name].default == default, name


@pytest.mark.parametrize("model, message", [
    (torch.nn.Linear(6, 2), "must be a lightning.pytorch.LightningModule, got Linear; for a plain torch.nn.Module"),
    (NoOptimizers(), "does not define configure_optimizers()"),
    (NoForward(), "does not define forward()"),
    (TwoInputs(), "forward takes 2 input(s) (a, b) but feature_cols names 1 column(s) ['features']"),
])
def test_a_model_the_estimator_cannot_train(tmp_path, model, message):
    with pytest.raises(ValueError) as raised:
        _fit(tmp_path, model=model)
    assert message in str(raised.value)


def test_a_pytorch_lightning_module_is_told_to_import_lightning_pytorch(tmp_path):
    old = pytest.importorskip("pytorch_lightning")

    class OldStyle(old.LightningModule):
        def forward(self, x):
            return x

    with pytest.raises(ValueError, match="define it with `import lightning.pytorch as pl`"):
        _fit(tmp_path, model=OldStyle())


@pytest.mark.parametrize("params, message", [
    (dict(optimizer=torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)), "optimizer= cannot be given"),
    (dict(loss=torch.nn.functional.mse_loss), "loss= cannot be given"),
    (dict(loss_weights=[1.0]), "loss_weights= cannot be given"),
    (dict(callbacks=[TorchEstimatorCallback()]), "is not a lightning.pytorch.Callback"),
    (dict(trainer_args={"max_epoch": 3}), "max_epoch is not a keyword of lightning.pytorch.Trainer"),
    (dict(trainer_args={"strategy": "ddp"}), "strategy is the estimator's"),
    (dict(num_gpus=2), "each rank drives one device"),
    (dict(data_module=object), "pass a lightning.pytorch.LightningDataModule"),
    (dict(logger="csv"), "pass a lightning.pytorch.loggers.Logger"),
])
def test_params_the_estimator_refuses(tmp_path, params, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _fit(tmp_path, **params)


@pytest.mark.parametrize("version", ["2.3.3", "2.7.0"])
def test_a_lightning_release_outside_the_supported_range(tmp_path, monkeypatch, version):
    import lightning
    monkeypatch.setattr(lightning, "__version__", version)
    with pytest.raises(ImportError, match="lightning >= 2.4") as raised:
        _fit(tmp_path)
    assert INSTALL_HINT in str(raised.value)


def test_without_lightning_the_error_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['lightning'] = None; sys.modules['lightning.pytorch'] = None\n"
            "from horovod_spark.spark.lightning import TorchEstimator\n"
            "import torch\n"
            "try:\n"
            "    TorchEstimator(model=torch.nn.Linear(1, 1), feature_cols=['x'], label_cols=['y'],\n"
            "                   store=%r).fit_on_parquet('none')\n"
            "except ImportError as exc:\n"
            "    print('ImportError:', exc)\n" % str(tmp_path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ImportError: horovod_spark.spark.lightning.TorchEstimator needs Lightning")
    assert INSTALL_HINT in proc.stdout
