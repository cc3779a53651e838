"""DistributedOptimizer for Keras 3 (TensorFlow backend): ``horovod_spark.keras.DistributedOptimizer``,
and what ``horovod_spark.tensorflow.DistributedOptimizer`` returns for a Keras optimizer (it lives in
the TensorFlow layer so that both packages use it without the lower one importing the higher).

Keras 3 funnels every update (``fit``'s train step, ``apply_gradients``, custom loops) through
``Optimizer.apply(grads, trainable_variables)``, so the wrapper is a subclass of the user's
optimizer class, created at run time, that overrides ``apply`` to average the gradients first.
The subclass keeps the base class's name and module: ``isinstance`` checks hold and a model saved
with it names the plain optimizer, so it loads with or without horovod_spark.
"""
import dataclasses
import warnings

import keras
import tensorflow as tf

from horovod_spark.common.process_sets import global_process_set
from horovod_spark.tensorflow._op_args import Average
from horovod_spark.tensorflow.compression import Compression
from horovod_spark.tensorflow.gradient_reduction import (
    LocalSources,
    ReduceSettings,
    local_layer_variables,
    reduce_gradients,
)


@dataclasses.dataclass
class _Settings:
    reduce: ReduceSettings
    backward_passes_per_step: int = 1
    average_aggregated_gradients: bool = False
    # Names the allreduces, so it must be the same on every rank: Horovod's ``name or
    # "Distributed<Class>"``, not Keras' per-process automatic name (``sgd_1`` on a rank that made
    # one more optimizer than the others would never match).
    prefix: str = "DistributedOptimizer"

    def __post_init__(self):
        if int(self.backward_passes_per_step) < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got %r" % (self.backward_passes_per_step,))
        self.backward_passes_per_step = int(self.backward_passes_per_step)


class _Accumulators:
    """Local gradient sums for backward_passes_per_step > 1. Plain tf.Variables held outside the
    optimizer's tracked state, so saved models carry only the wrapped optimizer's own variables."""

    def __init__(self, variables):
        with tf.init_scope():  # created eagerly even when first reached while tracing
            self.sums = [tf.Variable(tf.zeros(v.shape, dtype=v.dtype), trainable=False,
                                     name="hvd_grad_sum_%d" % i) for i, v in enumerate(variables)]
            self.passes = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvd_local_passes")


class _DistributedOptimizer:
    """Mixed in front of the user's optimizer class; settings live on the generated class."""

    _hvd_settings = None

    def _hvd_prefix(self):
        return self._hvd_settings.prefix

    def register_local_var(self, var):
        """Keep ``var``'s gradient rank-local: it is not allreduced (only scaled by 1/size when
        ``scale_local_gradients``), as in Horovod."""
        local = self.__dict__.get("_hvd_local")
        if local is None:
            local = LocalSources()
            object.__setattr__(self, "_hvd_local", local)
        local.add(var)

    def _hvd_variables(self, trainable_variables, count):
        if trainable_variables is not None:
            return list(trainable_variables)
        known = getattr(self, "_trainable_variables", None)  # what base apply() falls back to
        return list(known) if known is not None and len(known) == count else None

    def _hvd_reduce(self, grads, variables):
        local = self.__dict__.get("_hvd_local")
        local = local.indices(variables) if local is not None else frozenset()
        return reduce_gradients(grads, self._hvd_settings.reduce, self._hvd_prefix(), variables, local)

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = self._hvd_variables(trainable_variables, len(grads))
        if self._hvd_settings.backward_passes_per_step == 1:
            return super().apply(self._hvd_reduce(grads, variables), trainable_variables)
        return self._hvd_apply_aggregated(grads, trainable_variables, variables)

    def _hvd_apply_aggregated(self, grads, trainable_variables, variables):
        settings = self._hvd_settings
        if variables is None:
            raise ValueError("backward_passes_per_step > 1 needs the trainable variables: call "
                             "apply(grads, trainable_variables) or build the optimizer first")
        if not self.built:
            # Built here, not inside the cond below, where creating variables is not allowed.
            self.build(variables)
        acc = self.__dict__.get("_hvd_accumulators")
        if acc is None:
            acc = _Accumulators(variables)
            object.__setattr__(self, "_hvd_accumulators", acc)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            acc.sums[i].assign_add(tf.convert_to_tensor(grads[i], dtype=acc.sums[i].dtype))
        acc.passes.assign_add(1)
        base_apply = super().apply
        n = settings.backward_passes_per_step

        def update():
            summed = [None] * len(grads)
            for i in present:
                s = acc.sums[i].read_value()
                summed[i] = s / tf.cast(n, s.dtype) if settings.average_aggregated_gradients else s
            base_apply(self._hvd_reduce(summed, variables), trainable_variables)
            for i in present:
                acc.sums[i].assign(tf.zeros_like(acc.sums[i]))
            return tf.constant(True)

        def count_only():
            # Every batch counts, as in Horovod and in Keras' own gradient accumulation, so
            # schedules keyed on ``iterations`` advance per batch (the update increments it itself).
            self.iterations.assign_add(1)
            return tf.constant(False)

        if tf.executing_eagerly():
            if int(acc.passes.numpy()) % n == 0:
                update()
            else:
                count_only()
            return None
        tf.cond(tf.equal(acc.passes % n, 0), update, count_only)
        return None


def is_distributed(optimizer):
    return isinstance(optimizer, _DistributedOptimizer)


def distributed_class(base_cls, settings):
    """A subclass of ``base_cls`` that averages gradients per ``settings`` in ``apply``."""
    return type(base_cls.__name__, (_DistributedOptimizer, base_cls),
                {"__module__": base_cls.__module__, "__qualname__": base_cls.__qualname__,
                 "__doc__": base_cls.__doc__, "_hvd_settings": settings})


def make_settings(compression=Compression.none, sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                  backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0, groups=None,
                  process_set=global_process_set, scale_local_gradients=True, prefix="DistributedOptimizer"):
    reduce = ReduceSettings(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                            gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
                            groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    return _Settings(reduce, backward_passes_per_step, average_aggregated_gradients, prefix)


def check_backend():
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError("horovod_spark.keras needs the TensorFlow Keras backend (KERAS_BACKEND=tensorflow); "
                           "the active backend is %r" % keras.backend.backend())


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Return a copy of the Keras ``optimizer`` that averages gradients across ranks before applying.

    As in Horovod, the copy is made from ``optimizer.get_config()``, so wrap before training
    (slot variables of an optimizer that already took steps are not carried over).
    ``backward_passes_per_step``: sum gradients locally over that many ``apply`` calls and
    communicate once (``average_aggregated_gradients`` divides the sum by it); ``iterations``
    still counts every batch, as in Horovod. ``compression``, ``sparse_as_dense``, ``op``,
    ``gradient_predivide_factor``, ``num_groups``/``groups`` are as in DistributedGradientTape;
    ``register_local_var(var)`` keeps a variable's gradient rank-local.

    Mixed precision: with the ``mixed_float16`` global policy (or a ``LossScaleOptimizer`` passed
    in) the result is a distributed LossScaleOptimizer, averaging before the loss scale checks for
    overflow, so every rank skips the same steps. (Wrapped the other way round, as Keras' compile
    would on its own, each rank would check its local gradients and ranks that disagree would
    stop matching collectives.)
    """
    check_backend()
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("DistributedOptimizer wraps a keras.optimizers.Optimizer (Keras 3); got %s"
                        % type(optimizer).__name__)
    if is_distributed(optimizer):
        raise ValueError("this optimizer is already a DistributedOptimizer")
    if optimizer.built:
        warnings.warn("DistributedOptimizer: the optimizer was already built; its slot variables are not "
                      "copied into the distributed optimizer (wrap it before training)", stacklevel=2)
    base_name = type(getattr(optimizer, "inner_optimizer", optimizer)).__name__
    settings = make_settings(compression, sparse_as_dense, gradient_predivide_factor, op, backward_passes_per_step,
                             average_aggregated_gradients, num_groups, groups, process_set, scale_local_gradients,
                             prefix=name or "Distributed%s" % base_name)
    if _mixed_float16() and not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    return distributed_class(type(optimizer), settings).from_config(config)


def _mixed_float16():
    return keras.config.dtype_policy().name == "mixed_float16"


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                                sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, groups=None,
                                process_set=global_process_set, local_layers=None, scale_local_gradients=True):
    """A DistributedOptimizer whose ``local_layers`` (a Keras layer or a list of them) keep
    rank-local gradients, as ``horovod.keras.PartialDistributedOptimizer``."""
    wrapped = DistributedOptimizer(optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
                                   gradient_predivide_factor=gradient_predivide_factor, op=op, groups=groups,
                                   process_set=process_set, scale_local_gradients=scale_local_gradients)
    for var in local_layer_variables(local_layers):
        wrapped.register_local_var(var)
    return wrapped
