"""What every rank runs for LightningEstimator.fit: a ``lightning.pytorch.Trainer`` with
``HorovodStrategy`` over this rank's shard of the prepared data (or the user's LightningDataModule),
the user's callbacks and logger, a checkpoint per epoch in the store (rank 0), progress for the
driver (rank 0), and rank 0's final weights and history as the result.

Resuming (by run_id, or after a reset in an elastic fit) hands Lightning its own checkpoint of the
Trainer (``fit(ckpt_path=...)``), so the module, the optimizers, the LR schedulers, the loops'
epoch and the callbacks' state (EarlyStopping, ModelCheckpoint) carry on where they stopped.
"""
import io
import logging
import os
import re
import tempfile
import warnings

import cloudpickle
import lightning.pytorch as pl
import torch

from horovod_spark.lightning import HorovodStrategy

from . import lightning_data, lightning_payload
from .common import rank_device
from .common.checkpoint import CheckpointStore, resumes
from .common.history import History
from .common.nonfinite import LossGuard
from .common.rank_data import report_cache, set_mp_start_method
from .common.rank_trainer import RankTrainer
from .common.run_logs import RunLogs
from .common.tensorboard_scalars import NO_TENSORBOARD
from .lightning_rank_callback import EstimatorCallback

CHECKPOINT_FORMAT = 1

# Lightning's advice that does not apply to the estimator's loaders: the reader batches and reads
# ahead on its own thread (no DataLoader workers needed), and a short epoch is the user's choice.
# Lightning's own use of torch's pytree API warns from inside Lightning on newer torch releases.
_QUIET = ("does not have many workers", "smaller than the logging interval", "has `shuffle=True`",
          "has `__len__` defined", "isinstance(treespec, LeafSpec)")


def train(spec):
    set_mp_start_method(spec)
    import horovod_spark.torch as hvd
    hvd.init()
    try:
        trainer = LightningRankTrainer(spec, hvd)
        if spec.elastic:
            from .lightning_elastic import train_elastic
            return train_elastic(trainer)
        rank_device.report_devices(hvd, trainer.cpu_fallback)
        return trainer.run()
    finally:
        hvd.shutdown()


def load_checkpoint(data: bytes) -> dict:
    # Written by this run's own rank 0 into the user's store: as trusted as the pickled model.
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError("checkpoint format %r is not %r" % (state.get("format"), CHECKPOINT_FORMAT))
    return state


class LightningRankTrainer(RankTrainer):
    writes_epoch_scalars = False  # the Trainer's logger (TensorBoardLogger unless the user gave one) does

    def __init__(self, spec, hvd):
        self.spec, self.hvd = spec, hvd
        # Ranks sharing a host would otherwise each start a thread per core and fight over them.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))
        # Kept pickled: every (re)start of the Trainer takes fresh copies of the module and callbacks.
        self.pickled = cloudpickle.loads(spec.payload)
        self.parts = lightning_payload.unpack(spec.payload)
        self.transformation_fn = self.parts["transformation_fn"]
        use_gpu = spec.use_gpu and self.parts["num_gpus"] != 0
        self.device = rank_device.torch_device(use_gpu, hvd)
        self.cpu_fallback = rank_device.cpu_fallback(use_gpu, spec.gpu_notice, self.device.type == "cpu",
                                                     rank_device.TORCH_NO_GPU)
        self.checkpoints = CheckpointStore(spec.store, spec.run_id, keep=spec.keep_checkpoints)
        self.history = History()
        self.output_shapes = None
        self.start_epoch, self.lightning_checkpoint = spec.start_epoch, None
        if resumes(spec):
            state = load_checkpoint(spec.store.read_bytes(spec.resume_path))
            self.history = History(state["history"])
            self.lightning_checkpoint = state["lightning"]
        # The loggers write in the store's logs directory itself (a local store) or in a scratch
        # directory copied there after each epoch (run_logs.py).
        self.run_logs = RunLogs(spec.store, spec.run_id)
        self.logs_dir = self.run_logs.directory
        self.module = None
        self.lightning_trainer = None
        self.place()
        self.loss_guard = self._loss_guard()

    def place(self):
        super().place()
        self.loss_guard = self._loss_guard()

    def _loss_guard(self):
        return LossGuard("raise" if self.parts["terminate_on_nan"] else self.spec.nonfinite_loss, self.rank)

    # -- the fit --------------------------------------------------------------------------------------
    def run(self):
        spec = self.spec
        self.reporter.train_begin(spec.epochs, spec.start_epoch, self.train_reader.steps_per_epoch, self.val_steps,
                                  spec.run_id)
        self.fit(self.lightning_checkpoint)
        return self.finish()

    def fit(self, lightning_checkpoint, commit=None):
        """One ``Trainer.fit`` from ``lightning_checkpoint`` (bytes of Lightning's checkpoint, or
        None to start afresh); ``commit(epoch, checkpoint)`` runs after each epoch's checkpoint."""
        spec = self.spec
        pl.seed_everything(spec.seed, workers=True, verbose=False)
        module = cloudpickle.loads(self.pickled["model"])
        callbacks = cloudpickle.loads(self.pickled["callbacks"])
        self.module = module
        self.lightning_trainer = self._trainer(EstimatorCallback(self, commit), callbacks)
        float_dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
        data_module = self.parts["data_module"]
        with tempfile.TemporaryDirectory(prefix="hs-lightning-resume-") as scratch, warnings.catch_warnings():
            for text in _QUIET:
                warnings.filterwarnings("ignore", message=".*%s" % re.escape(text))
            ckpt_path = None
            if lightning_checkpoint is not None:
                ckpt_path = os.path.join(scratch, "resume.ckpt")
                with open(ckpt_path, "wb") as f:
                    f.write(lightning_checkpoint)
            if data_module is not None:
                self.lightning_trainer.fit(module, datamodule=lightning_data.build_data_module(
                    data_module, spec, self.rank, self.size, self.parts), ckpt_path=ckpt_path)
            else:
                train_loader, val_loader = lightning_data.loaders(self, spec, self.rank, self.size, float_dtype,
                                                                  self.parts["debug_data_loader"])
                self.lightning_trainer.fit(module, train_loader, val_loader, ckpt_path=ckpt_path)

    def _trainer(self, estimator_callback, callbacks):
        spec, parts = self.spec, self.parts
        logging.getLogger("lightning.pytorch").setLevel(logging.INFO if spec.verbose >= 2 else logging.WARNING)
        cuda = self.device.type == "cuda"
        user_checkpoints = any(isinstance(cb, pl.callbacks.ModelCheckpoint) for cb in callbacks)
        kwargs = dict(
            strategy=HorovodStrategy(compression=self.compression(parts["compression"])),
            accelerator="gpu" if cuda else "cpu", devices=[self.device.index] if cuda else 1,
            max_epochs=spec.epochs, limit_train_batches=self.train_reader.steps_per_epoch,
            limit_val_batches=spec.validation_steps_per_epoch or 1.0, num_sanity_val_steps=0,
            accumulate_grad_batches=spec.backward_passes_per_step,
            callbacks=list(callbacks) + [estimator_callback], logger=self._logger(),
            log_every_n_steps=parts["log_every_n_steps"], profiler=parts["profiler"],
            enable_checkpointing=user_checkpoints, enable_progress_bar=False,
            enable_model_summary=spec.verbose >= 2, default_root_dir=self.logs_dir)
        kwargs.update(parts["trainer_args"])
        trainer = pl.Trainer(**kwargs)
        profiler = trainer.profiler
        if parts["profiler"] is not None and getattr(profiler, "dirpath", "") is None:
            # A profiler's report goes beside the logs, as its file name says which rank wrote it.
            profiler.dirpath, profiler.filename = self.logs_dir, "profile"
        return trainer

    def _logger(self):
        logger = self.parts["logger"]
        if logger is False:
            return False
        if logger is None or logger is True:
            try:
                return pl.loggers.TensorBoardLogger(self.logs_dir)
            except ModuleNotFoundError:  # neither tensorboard nor tensorboardX is installed
                if self.rank == 0 and self.spec.verbose:
                    logging.getLogger(__name__).warning(NO_TENSORBOARD)
                return pl.loggers.CSVLogger(self.logs_dir)
        _reroot(logger, self.logs_dir)
        return logger

    def checkpoint_bytes(self, epochs_done: int, lightning_bytes: bytes) -> bytes:
        buf = io.BytesIO()
        torch.save({"format": CHECKPOINT_FORMAT, "epochs_done": epochs_done, "lightning": lightning_bytes,
                    "history": self.history.to_dict(), "output_shapes": self.output_shapes}, buf)
        return buf.getvalue()

    def finish(self):
        spec = self.spec
        self.reporter.train_end()
        report_cache(spec, self.rank, self.train_reader, self.val_reader)
        if self.rank != 0:
            return None
        self.run_logs.close()
        state = self._best_weights() or {k: v.detach().cpu() for k, v in self.module.state_dict().items()}
        buf = io.BytesIO()
        torch.save(state, buf)
        return {"model_state": buf.getvalue(), "history": self.history.to_dict(),
                "output_shapes": self.output_shapes, "epochs": self.history.epochs}

    def _best_weights(self):
        """As Horovod's Lightning estimator: with a ModelCheckpoint among the callbacks, the model is
        its best checkpoint's weights."""
        for callback in self.lightning_trainer.checkpoint_callbacks:
            path = getattr(callback, "best_model_path", "")
            if path and os.path.exists(path):
                return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
        return None


def _reroot(logger, directory: str) -> None:
    """Make the user's logger write under ``directory`` (the run's logs), as Horovod sets its
    ``save_dir``: Lightning's file loggers keep it as their root directory."""
    try:
        logger.save_dir = directory
        return
    except AttributeError:
        pass
    # CSVLogger and TensorBoardLogger keep it (read-only) in both attributes.
    from lightning.fabric.utilities.cloud_io import get_filesystem
    for attribute in ("_save_dir", "_root_dir"):
        if hasattr(logger, attribute):
            setattr(logger, attribute, directory)
            logger._fs = get_filesystem(directory)
