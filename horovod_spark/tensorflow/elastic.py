"""``horovod_spark.tensorflow.elastic``: Horovod's ``hvd.elastic`` for TensorFlow 2 (eager) and Keras.

``TensorFlowKerasState(model, optimizer)`` keeps a Keras model's and optimizer's variables across
resets; ``TensorFlowState(variables)`` a list of ``tf.Variable``; both take picklable values as
keyword arguments, like ``ObjectState``. ``run`` is the decorator of ``horovod_spark.torch.elastic``
for TensorFlow: a collective that failed inside a ``tf.function`` (where TensorFlow wraps the error
in its own ``OpError``) is turned back into ``HorovodInternalError``.
"""
import functools

import numpy as np
import tensorflow as tf

from horovod_spark.common import basics
from horovod_spark.common import elastic as _elastic
from horovod_spark.common.elastic import State
from horovod_spark.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovod_spark.tensorflow.functions import broadcast_object, broadcast_variables

_CORE_ERRORS = ("HorovodInternalError", "HorovodTimeoutError")


def run(func):
    """Decorate ``func(state, ...)`` so it survives lost and added ranks (see
    ``horovod_spark.torch.elastic.run``)."""
    from horovod_spark.tensorflow._control import init, shutdown

    @functools.wraps(func)
    def unwrap_tf_errors(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as exc:
            if any(name in str(exc.message) for name in _CORE_ERRORS):
                raise HorovodInternalError(exc.message) from exc
            raise

    return _elastic.run_fn(unwrap_tf_errors, functools.partial(_elastic.reset_core, shutdown=shutdown, init=init))


class ObjectState(_elastic.ObjectState):
    """Picklable values kept across resets: ``ObjectState(epoch=0)``."""

    def __init__(self, bcast_object=broadcast_object, get_rank=basics.rank, **kwargs):
        super().__init__(bcast_object, get_rank, **kwargs)


class _VariablesState(ObjectState):
    """A list of variables (``_tracked()``) saved as host copies at each commit."""

    def __init__(self, **kwargs):
        self._saved_values = None
        super().__init__(**kwargs)

    def _tracked(self):
        raise NotImplementedError

    def _save_variables(self):
        self._saved_values = [np.array(v.numpy(), copy=True) for v in self._tracked()]

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        tracked = self._tracked()
        if len(tracked) != len(self._saved_values):
            raise RuntimeError("%s.restore(): the state tracks %d variables but %d were committed (variables "
                               "created after the last commit, e.g. an optimizer built late); commit once the "
                               "model and optimizer are built" % (type(self).__name__, len(tracked),
                                                                  len(self._saved_values)))
        for variable, value in zip(tracked, self._saved_values):
            variable.assign(value)
        super().restore()

    def sync(self):
        tracked = self._tracked()
        if tracked:
            broadcast_variables(tracked, root_rank=0)
        self._save_variables()
        super().sync()


class TensorFlowKerasState(_VariablesState):
    """A built Keras ``model`` and its ``optimizer`` (default ``model.optimizer``), plus picklable
    values as keyword arguments. ``backend`` is accepted for Horovod's TF1 sessions and unused."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not getattr(model, "built", True):
            raise ValueError("TensorFlowKerasState needs a built model: call model.build(input_shape) (or "
                             "run it on a batch) first")
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "optimizer", optimizer if optimizer is not None else getattr(model, "optimizer", None))
        object.__setattr__(self, "backend", backend)
        super().__init__(**kwargs)
        self._save_variables()

    def _tracked(self):
        variables = list(self.model.variables)
        if self.optimizer is not None:
            optimizer_variables = self.optimizer.variables
            variables += list(optimizer_variables() if callable(optimizer_variables) else optimizer_variables)
        return variables


class TensorFlowState(_VariablesState):
    """``variables`` (a list of ``tf.Variable``) plus picklable values as keyword arguments.
    ``session`` is accepted for Horovod's TF1 sessions and unused: TensorFlow 2 runs eagerly."""

    def __init__(self, variables=None, session=None, **kwargs):
        if variables is None:
            raise ValueError("TensorFlowState needs variables=[...]: TensorFlow 2 has no global variable collection")
        object.__setattr__(self, "variables", list(variables))
        object.__setattr__(self, "session", session)
        super().__init__(**kwargs)
        self._save_variables()

    def _tracked(self):
        return self.variables


__all__ = ["run", "State", "ObjectState", "TensorFlowKerasState", "TensorFlowState", "HorovodInternalError",
           "HostsUpdatedInterrupt"]
