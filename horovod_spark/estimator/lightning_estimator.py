"""LightningEstimator: fit a lightning.pytorch.LightningModule on a Spark DataFrame with horovod_spark
ranks (Horovod's ``horovod.spark.lightning.TorchEstimator``)."""
import io

from pyspark.ml.param import TypeConverters

from . import lightning_payload
from .common import converters as conv
from .common.declared_params import declare_param
from .common.estimator import HorovodEstimator
from .common.fit import FrameworkPlan
from .lightning_model import LightningModel
from .torch_model import copy_module


class LightningEstimator(HorovodEstimator):
    """A Spark ML Estimator training a ``lightning.pytorch.LightningModule`` data-parallel on
    ``num_proc`` Spark tasks, each running a ``lightning.pytorch.Trainer`` with
    ``horovod_spark.lightning.HorovodStrategy``.

    ``fit(df)`` writes the selected columns to Parquet in ``store`` (cached), and every rank's
    Trainer reads its shard with the Arrow reader. ``training_step`` and ``validation_step`` get a
    batch as a dict {column name: tensor} of the feature, label (and sample weight) columns; the
    module's ``configure_optimizers`` gives the optimizers and LR schedulers. Whatever the module
    logs per epoch (``self.log``) becomes the returned :class:`LightningModel`'s history. Each
    epoch is checkpointed (Lightning's own checkpoint of the Trainer) under
    ``<store>/runs/<run_id>/checkpoints``, and a fit with the run_id of an interrupted one resumes
    after its last completed epoch. Loggers write under ``<store>/runs/<run_id>/logs``. See
    docs/lightning.md.
    """
    framework = "lightning"

    trainer_args = declare_param("trainer_args", "dict of lightning.pytorch.Trainer keyword arguments, added to and "
                                 "overriding those the estimator sets")
    logger = declare_param("logger", "a Lightning logger, whose save_dir becomes the store's run logs directory; "
                           "default: a TensorBoardLogger there when tensorboard is installed, else a CSVLogger; "
                           "False for none")
    log_every_n_steps = declare_param("log_every_n_steps", "Trainer(log_every_n_steps=...): how often the logger "
                                      "gets the step metrics", TypeConverters.toInt, default=50)
    profiler = declare_param("profiler", "Trainer(profiler=...): a Lightning profiler or its name ('simple', "
                             "'advanced'); a profiler object's report goes to the run logs directory")
    loader_num_epochs = declare_param("loader_num_epochs", "Horovod's reader epochs per loader; here each epoch "
                                      "reads its own pass over the shard, so only None or a positive integer is "
                                      "accepted and nothing changes", conv.to_optional_int)
    terminate_on_nan = declare_param("terminate_on_nan", "stop the fit with an error at the first NaN or infinite "
                                     "training loss (otherwise nonfinite_loss decides)", TypeConverters.toBoolean,
                                     default=False)
    num_gpus = declare_param("num_gpus", "GPUs per rank: 1 (default when the rank has CUDA and use_gpu) or 0 (CPU)",
                             conv.to_optional_int)
    debug_data_loader = declare_param("debug_data_loader", "each rank prints what its data loaders read (rows, "
                                      "batches, shard) once per epoch", TypeConverters.toBoolean, default=False)
    train_async_data_loader_queue_size = declare_param(
        "train_async_data_loader_queue_size", "batches the training reader reads ahead on its thread (default: the "
        "reader's own)", conv.to_optional_int)
    val_async_data_loader_queue_size = declare_param(
        "val_async_data_loader_queue_size", "batches the validation reader reads ahead on its thread (default: the "
        "reader's own)", conv.to_optional_int)
    train_minibatch_fn = declare_param("train_minibatch_fn", "Horovod's Torch training step; a LightningModule "
                                       "trains with its own training_step, so it has no effect here")
    loss_constructors = declare_param("loss_constructors", "Horovod's Torch loss constructors; a LightningModule "
                                      "computes its loss in training_step, so they have no effect here")
    data_module = declare_param("data_module", "a lightning.pytorch.LightningDataModule (instance, or a class built "
                                "on every rank with the estimator's data keywords) used instead of the prepared "
                                "data; or the reader of the prepared data: 'arrow' (built in) or 'petastorm' (older "
                                "stack only)", default="arrow")

    def getNumGPUs(self):
        """Value of the ``num_gpus`` param (Horovod's spelling of its accessor)."""
        return self.getOrDefault("num_gpus")

    def setNumGPUs(self, value):
        """Set the ``num_gpus`` param; returns self."""
        return self._set(num_gpus=value)

    def get_model_class(self):
        """The Model class ``fit`` returns (Horovod's estimator method)."""
        return LightningModel

    def reader_data_module(self) -> str:
        value = self.getOrDefault("data_module")
        return value if isinstance(value, str) else "arrow"

    # -- HorovodEstimator hooks --------------------------------------------------------------------
    def _check_framework(self, cfg):
        payload, signature = lightning_payload.check_and_pack(self, cfg)
        return FrameworkPlan(payload=payload, signature=signature)

    def _remote_trainer(self):
        from .lightning_remote import train
        return train

    def _build_model(self, result, cfg, run_id):
        import torch
        model = copy_module(self.getOrDefault("model")).cpu()
        model.load_state_dict(torch.load(io.BytesIO(result["model_state"]), map_location="cpu", weights_only=True))
        model.eval()
        return LightningModel(model=model, feature_cols=cfg.feature_cols, label_cols=cfg.label_cols,
                              input_shapes=cfg.input_shapes, history=result["history"],
                              output_shapes=result["output_shapes"], run_id=run_id)
