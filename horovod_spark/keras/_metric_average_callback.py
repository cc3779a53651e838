"""MetricAverageCallback: make every rank log the mean of the ranks' epoch metrics."""
import keras
import numpy as np

from horovod_spark.common import ops as _core
from horovod_spark.tensorflow import array_collectives


class MetricAverageCallback(keras.callbacks.Callback):
    """Replace each metric in the epoch-end logs by its mean over all ranks.

    Place it before callbacks that read the metrics (checkpointing, early stopping, LR
    schedules) so they see the averaged values; Keras' History sees them too.
    """

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if _is_numeric(v))
        if not keys:
            return
        values = [np.asarray(logs[k], dtype=np.float64) for k in keys]
        flat = np.concatenate([v.reshape(-1) for v in values])
        # One collective for all metrics; keys are sorted so every rank packs them alike, and a
        # rank logging a different number of values fails with a shape mismatch, not a hang.
        mean = array_collectives.allreduce([flat], ["MetricAverageCallback.%d" % epoch], _core.Average)[0]
        start = 0
        for k, v in zip(keys, values):
            piece = mean[start:start + v.size]
            start += v.size
            logs[k] = float(piece[0]) if v.ndim == 0 else piece.reshape(v.shape)


def _is_numeric(value):
    try:
        return np.asarray(value).dtype.kind in "biuf"
    except Exception:  # logs may hold arbitrary objects; those are not averaged
        return False
