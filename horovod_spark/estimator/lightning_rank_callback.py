"""The Lightning callback a LightningEstimator rank adds to its Trainer: the driver's progress bar,
the loss guard, the fit's history, and at each epoch's end the checkpoint in the store (and, in an
elastic fit, the commit)."""
import math
import os
import tempfile
import time

import lightning.pytorch as pl
import torch


def epoch_logs(trainer) -> dict:
    """What the module logged for the epoch (``trainer.callback_metrics``), as floats: training and
    validation metrics (``self.log``), each name as logged. Non-scalar values are left out."""
    logs = {}
    for name, value in trainer.callback_metrics.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, (int, float)):
            logs[name] = float(value)
    return logs


def step_loss(outputs):
    """The training step's loss as a float (None when the step returned none)."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return float(loss.detach())
    return None


class EstimatorCallback(pl.Callback):
    """``rank_trainer``: the LightningRankTrainer (reporter, loss guard, history, checkpoints);
    ``commit(epoch, checkpoint_bytes)``: called on every rank after each epoch's checkpoint, or None."""

    def __init__(self, rank_trainer, commit=None):
        self.rank_trainer, self.commit = rank_trainer, commit
        self._started = self._loss_sum = self._steps = 0

    def on_train_epoch_start(self, trainer, pl_module):
        self._started, self._loss_sum, self._steps = time.monotonic(), 0.0, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        owner = self.rank_trainer
        loss = step_loss(outputs)
        if loss is None:
            return
        owner.loss_guard.check(loss, trainer.current_epoch, batch_idx)
        if math.isfinite(loss):
            self._loss_sum += loss
            self._steps += 1
        logs = {"loss": self._loss_sum / self._steps} if self._steps else {}
        owner.reporter.step(trainer.current_epoch, batch_idx + 1, logs)

    def on_train_epoch_end(self, trainer, pl_module):
        # Lightning has run this epoch's validation by now: callback_metrics hold both.
        owner = self.rank_trainer
        epoch = trainer.current_epoch
        logs = epoch_logs(trainer)
        owner.history.append(dict(logs, num_ranks=owner.size) if owner.spec.elastic else logs)
        checkpoint = self._checkpoint(trainer, epoch + 1)
        if owner.rank == 0:
            owner.run_logs.sync()
        if self.commit is not None:
            self.commit(epoch, checkpoint)
        owner.reporter.epoch_end(epoch, logs, time.monotonic() - self._started)

    def _checkpoint(self, trainer, epochs_done):
        """Lightning's checkpoint of the whole Trainer (module, optimizers, schedulers, loops,
        callbacks' state), wrapped with the fit's history and written to the store by rank 0;
        returns its bytes on rank 0, None elsewhere. Every rank calls it (it ends with a barrier)."""
        owner = self.rank_trainer
        with tempfile.TemporaryDirectory(prefix="hs-lightning-ckpt-") as directory:
            path = os.path.join(directory, "trainer.ckpt")
            trainer.save_checkpoint(path)
            if owner.rank != 0:
                return None
            with open(path, "rb") as f:
                lightning_bytes = f.read()
        data = owner.checkpoint_bytes(epochs_done, lightning_bytes)
        owner.checkpoints.write(epochs_done, data)
        return lightning_bytes
