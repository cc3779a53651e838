"""BestModelCheckpoint: keep the best model so far, written by rank 0 only."""
import keras

from horovod_spark.common import basics as _basics

# Keras 3 validates the path's suffix at construction; a callback whose path is set later (the
# Spark KerasEstimator does that) is constructed with this placeholder.
_PLACEHOLDER = "horovod_spark_best_model.keras"


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Save the model when ``monitor`` improves (``save_best_only``), on rank 0 only.

    Horovod's signature plus ``filepath`` (None: set ``.filepath`` before training). Keras 3
    wants weights-only paths to end in ``.weights.h5`` (such a path saves weights only whatever
    ``save_weights_only`` says) and whole models in ``.keras``.
    Ranks other than 0 never write, so give every rank the same (averaged) metric with
    MetricAverageCallback if the choice should reflect all ranks.
    """

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto", save_freq="epoch",
                 filepath=None):
        if filepath is None:
            path = "horovod_spark_best_model.weights.h5" if save_weights_only else _PLACEHOLDER
        else:
            path = filepath
        self._weights_only_asked = bool(save_weights_only)
        super().__init__(filepath=path, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=self._weights_only_asked or str(path).endswith(".weights.h5"),
                         mode=mode, save_freq=save_freq)
        if filepath is None:
            self.filepath = None

    def on_train_begin(self, logs=None):
        if self.filepath is None:
            raise ValueError("BestModelCheckpoint has no filepath; pass filepath= or set .filepath before fit()")
        weights_path = str(self.filepath).endswith(".weights.h5")
        if self._weights_only_asked and not weights_path:
            raise ValueError("BestModelCheckpoint(save_weights_only=True) needs a path ending in .weights.h5 "
                             "(Keras 3), got %r" % (self.filepath,))
        self.save_weights_only = weights_path
        super().on_train_begin(logs)

    def on_train_batch_end(self, batch, logs=None):
        if _basics.rank() == 0:
            super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if _basics.rank() == 0:
            super().on_epoch_end(epoch, logs)
