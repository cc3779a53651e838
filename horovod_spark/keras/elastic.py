"""``horovod_spark.keras.elastic`` (also ``horovod_spark.tensorflow.keras.elastic``): Horovod's elastic
Keras API: ``run``, ``KerasState`` and the callbacks that keep a state current during ``model.fit``.

``CommitStateCallback(state, batches_per_commit=1)`` commits every ``batches_per_commit`` batches
and at each epoch's end; ``UpdateBatchStateCallback(state)`` keeps ``state.batch`` (and, after a
reset, shortens the epoch being resumed to the batches it had left); ``UpdateEpochStateCallback``
keeps ``state.epoch``, counted across resets. As in Horovod, ``fit`` then runs
``epochs=total_epochs - state.epoch`` (Keras numbers the epochs of each ``fit`` call from 0).
"""
import keras

from horovod_spark.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovod_spark.tensorflow.elastic import ObjectState, State, TensorFlowKerasState, run


class KerasState(TensorFlowKerasState):
    """``TensorFlowKerasState`` under the name ``horovod.tensorflow.keras.elastic`` gives it."""


class CommitStateCallback(keras.callbacks.Callback):
    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if isinstance(batches_per_commit, bool) or not isinstance(batches_per_commit, int) or batches_per_commit < 1:
            raise ValueError("batches_per_commit must be a positive integer, got %r" % (batches_per_commit,))
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        # Counted afresh after every reset, so all ranks commit at the same batches.
        self.batches_remaining = self.batches_per_commit

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        steps = self.params.get("steps") if self.params else None
        if steps:
            if self.steps_per_epoch is None:
                self.steps_per_epoch = steps
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        # Keras counts from 0 in each fit call; the state counts across resets. The epoch just
        # finished is not the one to resume from.
        self.state.epoch = self.initial_epoch + epoch + 1


__all__ = ["run", "State", "ObjectState", "KerasState", "TensorFlowKerasState", "CommitStateCallback",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "HorovodInternalError", "HostsUpdatedInterrupt"]
