"""The Keras callback through which a KerasEstimator rank keeps the estimator's contract: the run's
history, a checkpoint per epoch, TensorBoard scalars and progress events for the driver (rank 0).

It goes last in the callback list, so the logs it records are the ones MetricAverageCallback
already averaged over ranks (and that user callbacks saw).
"""
import math
import time

import keras
import numpy as np


class EstimatorCallback(keras.callbacks.Callback):
    def __init__(self, trainer):
        super().__init__()
        self.trainer = trainer
        self._started = None
        self._epoch = 0
        self._steps = 0

    def on_train_begin(self, logs=None):
        t = self.trainer
        t.reporter.train_begin(t.spec.epochs, t.spec.start_epoch, t.train_reader.steps_per_epoch, t.val_steps,
                               t.spec.run_id)

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.monotonic()
        self._epoch = epoch
        self._steps = 0

    def on_train_batch_end(self, batch, logs=None):
        # Keras' batch logs are running means over the epoch so far, as the Torch progress shows;
        # a mean turns NaN or infinite at the step whose loss did, so the step named is the culprit.
        values = _floats(logs)
        self._steps = batch + 1
        if "loss" in values:
            self.trainer.loss_guard.check(values["loss"], self._epoch, batch)
        if self.trainer.reporter.enabled:
            self.trainer.reporter.step(self._epoch, batch + 1, values)

    def on_epoch_end(self, epoch, logs=None):
        t = self.trainer
        # Before the checkpoint: an epoch whose weights went NaN is never written as one to resume from.
        t.loss_guard.check_weights(_nonfinite_weights(self.model), epoch, self._steps)
        values = _floats(logs)
        # Elastic fits also record on how many ranks each epoch ran (a lost rank shows as fewer).
        recorded = dict(values, num_ranks=t.size) if t.spec.elastic else values
        t.history.append(recorded)
        if t.rank == 0:
            t.checkpoints.write(epoch + 1, t.checkpoint_bytes(epoch + 1))
        t.scalars.epoch_end(epoch, recorded)
        # A None check, not `or`: time.monotonic() has no fixed origin, so no value of it means "unset".
        started = self._started if self._started is not None else time.monotonic()
        t.reporter.epoch_end(epoch, values, time.monotonic() - started)

    def on_train_end(self, logs=None):
        self.trainer.reporter.train_end()


def _nonfinite_weights(model) -> list:
    return [getattr(v, "path", v.name) for v in model.weights if not np.isfinite(v.numpy()).all()]


def _floats(logs) -> dict:
    out = {}
    for name, value in (logs or {}).items():
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            continue
        if array.size == 1:
            out[name] = float(array.reshape(()))
        elif array.size == 0:
            out[name] = math.nan
    return out
