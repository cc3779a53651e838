"""``LogCallback``: a Keras callback that sends training progress to the HorovodRunner's notebook cell
(sparkdl's ``sparkdl.horovod.tensorflow.keras.LogCallback``), through ``log_to_driver``.

Only the first rank logs, so ``driver_log_verbosity="log_callback_only"`` shows one line per
epoch (and per batch with ``per_batch_log=True``) however many ranks train.
"""
import time

import keras

from horovod_spark.common import basics, config

from .driver_log import log_to_driver


def _is_first_rank() -> bool:
    if basics.is_initialized():
        return basics.rank() == 0
    return config.RANK.get(default=0) == 0


def _format(logs) -> str:
    parts = []
    for name, value in sorted((logs or {}).items()):
        try:
            parts.append("%s=%.4g" % (name, float(value)))
        except (TypeError, ValueError):
            parts.append("%s=%s" % (name, value))
    return " ".join(parts)


class LogCallback(keras.callbacks.Callback):
    """Logs "epoch N/M" when an epoch starts, its metrics and duration when it ends, and with
    ``per_batch_log=True`` every batch's metrics; on the first rank only."""

    def __init__(self, per_batch_log: bool = False):
        super().__init__()
        self.per_batch_log = bool(per_batch_log)
        self._epoch = 0
        self._started = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._started = epoch, time.monotonic()
        if _is_first_rank():
            total = (self.params or {}).get("epochs")
            log_to_driver("epoch %d%s" % (epoch + 1, "/%d" % total if total else ""))

    def on_train_batch_end(self, batch, logs=None):
        if self.per_batch_log and _is_first_rank():
            log_to_driver("epoch %d batch %d: %s" % (self._epoch + 1, batch + 1, _format(logs)))

    def on_epoch_end(self, epoch, logs=None):
        if _is_first_rank():
            log_to_driver("epoch %d done in %.1f s: %s" % (epoch + 1, time.monotonic() - self._started,
                                                          _format(logs)))
