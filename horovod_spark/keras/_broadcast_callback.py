"""BroadcastGlobalVariablesCallback: start every rank from the root's weights."""
import keras

from horovod_spark.tensorflow.functions import broadcast_variables
from horovod_spark.tensorflow.gradient_reduction import LocalSources


def _is_seed_state(variable):
    """A keras.random.SeedGenerator's state (named so by Keras 3)."""
    return str(getattr(variable, "name", "")).split("/")[-1].split(":")[0] == "seed_generator_state"


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcast the model's and the optimizer's variables from ``root_rank`` once, so all ranks
    train from the same state (random initialisation differs per rank; a checkpoint may exist on
    the root only).

    It runs before the first batch when the model is already built (the optimizer is built then
    too, so its slots exist), else after the first batch, as Horovod does. ``local_variables`` (or
    ``register_local_var``) are left as each rank has them, as in Horovod; so are the state of
    Keras' random seed generators (Dropout, augmentation layers), which would otherwise make every
    rank draw the same random masks.
    """

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self._local_vars = LocalSources(local_variables or ())

    def register_local_var(self, var):
        """Leave ``var`` out of the broadcast (it stays rank-local)."""
        self._local_vars.add(var)

    def _broadcast(self):
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.model.trainable_variables)
        variables = list(self.model.variables)
        if optimizer is not None:
            variables += list(optimizer.variables)
        variables = [v for v in variables if v not in self._local_vars and not _is_seed_state(v)]
        broadcast_variables(variables, self.root_rank)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not self.broadcast_done and self.model.built:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()
