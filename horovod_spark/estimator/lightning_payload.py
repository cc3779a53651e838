"""What a LightningEstimator sends to its ranks, checked on the driver before any Spark job.

The LightningModule travels whole (cloudpickle: class and weights) and brings its own optimizers
(``configure_optimizers``) and losses (``training_step``); the Trainer's pieces (callbacks,
logger, profiler, a LightningDataModule) travel beside it.
"""
import inspect
import warnings

import cloudpickle

from horovod_spark.lightning.requirement import require_supported_lightning

from .common import payload as _shared
from .torch_payload import compression_name

ESTIMATOR = "horovod_spark.spark.lightning.TorchEstimator"

# Keywords Horovod's Lightning estimator takes but a LightningModule does not use; as there, they
# are accepted and have no effect (a warning says so).
_UNUSED_WITH_A_MODULE = ("loss_constructors", "train_minibatch_fn", "metrics")


def check_and_pack(est, cfg):
    """Check the module and the Lightning Params; return (payload bytes, signature dict)."""
    pl = require_supported_lightning(ESTIMATOR)
    get = est.getOrDefault
    model = get("model")
    check_module(model, pl)
    check_inputs(model, cfg.feature_cols)
    for name, fix in (("optimizer", "return it from LightningModule.configure_optimizers"),
                      ("loss", "compute it in LightningModule.training_step"),
                      ("loss_weights", "weigh the losses in LightningModule.training_step")):
        if get(name):
            raise ValueError("%s= cannot be given with a LightningModule: %s instead" % (name, fix))
    unused = [name for name in _UNUSED_WITH_A_MODULE if get(name)]
    if unused:
        warnings.warn("%s has no effect with a LightningModule, whose training_step and configure_optimizers "
                      "train it" % ", ".join("%s=" % n for n in unused), UserWarning, stacklevel=4)

    callbacks = list(cfg.callbacks)
    strangers = [cb for cb in callbacks if not isinstance(cb, pl.Callback)]
    if strangers:
        raise ValueError("callbacks: %r is not a lightning.pytorch.Callback; the Lightning estimator passes its "
                         "callbacks to the Trainer (e.g. EarlyStopping, ModelCheckpoint, LearningRateMonitor)"
                         % (strangers[0],))
    logger = get("logger")
    if logger is not None and not isinstance(logger, (bool, pl.loggers.Logger)):
        raise ValueError("logger=%r: pass a lightning.pytorch.loggers.Logger (e.g. CSVLogger('logs')), False for "
                         "none, or leave it unset for the default one in the store's run logs directory" % (logger,))
    trainer_args = get("trainer_args") or {}
    if not isinstance(trainer_args, dict) or not all(isinstance(k, str) for k in trainer_args):
        raise ValueError("trainer_args=%r: pass a dict of lightning.pytorch.Trainer keyword arguments"
                         % (trainer_args,))
    known = inspect.signature(pl.Trainer.__init__).parameters
    unknown = sorted(k for k in trainer_args if k not in known)
    if unknown:
        raise ValueError("trainer_args: %s %s not a keyword of lightning.pytorch.Trainer %s"
                         % (", ".join(unknown), "is" if len(unknown) == 1 else "are", pl.__version__))
    if "strategy" in trainer_args:
        raise ValueError("trainer_args: strategy is the estimator's (HorovodStrategy over the fit's ranks); leave "
                         "it out")
    num_gpus = get("num_gpus")
    if num_gpus is not None and num_gpus not in (0, 1):
        raise ValueError("num_gpus=%r: each rank drives one device; pass 1 (a GPU per rank, when it has one), 0 "
                         "(CPU), or leave it unset" % (num_gpus,))
    data_module = get("data_module")
    if not isinstance(data_module, str) and not _is_data_module(data_module, pl):
        raise ValueError("data_module=%r: pass a lightning.pytorch.LightningDataModule (an instance, or a class "
                         "taking the estimator's data keywords), or 'arrow' / 'petastorm' for the prepared data "
                         "reader" % (data_module,))
    for name in ("loader_num_epochs", "train_async_data_loader_queue_size", "val_async_data_loader_queue_size"):
        value = get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError("%s=%r: pass a positive integer or None" % (name, value))

    queues = (get("train_async_data_loader_queue_size"), get("val_async_data_loader_queue_size"))
    if est.reader_data_module() == "arrow":
        # The Arrow reader's read-ahead, in batches, is what Horovod's async loader queue holds.
        for options, size in zip((cfg.train_reader_options, cfg.val_reader_options), queues):
            if size is not None:
                options["prefetch_batches"] = size

    parts = {
        "model": _shared.pickled("model", model),
        "callbacks": _shared.pickled("callbacks", callbacks),
        "logger": _shared.pickled("logger", logger),
        "profiler": _shared.pickled("profiler", get("profiler")),
        "trainer_args": _shared.pickled("trainer_args", dict(trainer_args)),
        "data_module": _shared.pickled("data_module", None if isinstance(data_module, str) else data_module),
        "transformation_fn": _shared.pickled("transformation_fn", cfg.transformation_fn),
        "compression": compression_name(get("gradient_compression")),
        "log_every_n_steps": get("log_every_n_steps"),
        "terminate_on_nan": bool(get("terminate_on_nan")),
        "num_gpus": num_gpus,
        "loader_num_epochs": get("loader_num_epochs"),
        "debug_data_loader": bool(get("debug_data_loader")),
        "queue_sizes": queues,
    }
    signature = {
        "framework": "lightning",
        "model_class": "%s.%s" % (type(model).__module__, type(model).__qualname__),
        "parameters": [[name, list(p.shape)] for name, p in model.named_parameters()],
    }
    return cloudpickle.dumps(parts), signature


def check_module(model, pl):
    """A ``lightning.pytorch.LightningModule`` that configures its optimizers, or a ValueError saying
    what to change."""
    if model is None:
        raise ValueError("model is not set: pass model=<a lightning.pytorch.LightningModule>")
    if not isinstance(model, pl.LightningModule):
        if any(klass.__module__.split(".")[0] == "pytorch_lightning" and klass.__name__ == "LightningModule"
               for klass in type(model).__mro__):
            raise ValueError("model is a pytorch_lightning.LightningModule, from the separate pytorch_lightning "
                             "package; define it with `import lightning.pytorch as pl` (pl.LightningModule) instead")
        raise ValueError("model must be a lightning.pytorch.LightningModule, got %s; for a plain torch.nn.Module "
                         "with an optimizer and a loss use horovod_spark.estimator.TorchEstimator"
                         % type(model).__name__)
    if type(model).configure_optimizers is pl.LightningModule.configure_optimizers:
        raise ValueError("%s does not define configure_optimizers(): the Lightning estimator trains with the "
                         "optimizers it returns (e.g. return torch.optim.Adam(self.parameters(), lr=1e-3))"
                         % type(model).__name__)
    if type(model).training_step is pl.LightningModule.training_step:
        raise ValueError("%s does not define training_step(batch, batch_idx): it computes the loss the estimator "
                         "trains on, from a batch dict of column name -> tensor" % type(model).__name__)
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("model has no trainable parameters (requires_grad): nothing to train")


def check_inputs(model, feature_cols):
    """transform() calls ``model(*features)``: its forward must take one argument per feature column."""
    import lightning.pytorch as pl
    if type(model).forward is pl.LightningModule.forward:
        raise ValueError("%s does not define forward(): transform() calls it with one tensor per feature column "
                         "(%s)" % (type(model).__name__, ", ".join(feature_cols)))
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return  # not introspectable (e.g. a compiled forward): checked when it first runs
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if not len(required) <= len(feature_cols) <= len(positional):
        takes = "%d" % len(required) if len(required) == len(positional) else \
            "%d to %d" % (len(required), len(positional))
        raise ValueError("%s.forward takes %s input(s) (%s) but feature_cols names %d column(s) %s: transform() "
                         "passes one tensor per feature column, in order; make the two match"
                         % (type(model).__name__, takes, ", ".join(p.name for p in positional), len(feature_cols),
                            list(feature_cols)))


def _is_data_module(value, pl):
    return isinstance(value, pl.LightningDataModule) or (
        isinstance(value, type) and issubclass(value, pl.LightningDataModule))


def unpack(payload: bytes) -> dict:
    parts = cloudpickle.loads(payload)
    return {k: (cloudpickle.loads(v) if isinstance(v, bytes) else v) for k, v in parts.items()}
