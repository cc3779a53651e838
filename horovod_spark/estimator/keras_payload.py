"""What a KerasEstimator sends to its ranks, checked on the driver and rebuilt on each rank.

The model travels as ``.keras`` bytes (keras_io); the optimizer as (class, get_config()), the way
Keras itself rebuilds optimizers, so no variable of the driver's copy travels; loss, metrics and
callbacks are cloudpickled. Compile arguments come from the estimator's Params, or, where a Param
is unset, from the arguments the model was compiled with.
"""
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from horovod_spark.estimator.common import payload as _shared

from .keras_io import model_from_bytes, model_to_bytes


@dataclass
class CompileArgs:
    optimizer_cls: type
    optimizer_config: dict
    loss: Any
    metrics: Any                                # a list, or per output (dict / nested lists)
    loss_weights: Any = None
    weighted_metrics: Any = None
    extra: dict = field(default_factory=dict)   # run_eagerly, steps_per_execution

    def build_optimizer(self):
        return self.optimizer_cls.from_config(dict(self.optimizer_config))

    def compile(self, model, optimizer) -> None:
        # jit_compile=False: gradients are averaged by a tf.numpy_function, which XLA cannot compile.
        model.compile(optimizer=optimizer, loss=self.loss, metrics=self.metrics or None,
                      loss_weights=self.loss_weights, weighted_metrics=self.weighted_metrics,
                      jit_compile=False, **self.extra)


def compiled_with(model) -> dict:
    """The arguments ``model.compile`` was called with, as the original objects. Keras keeps them
    (unserialized) on the model; ``get_compile_config()`` would serialize them, which fails for
    lambdas."""
    if not getattr(model, "compiled", False):
        return {}
    kept = getattr(getattr(model, "_compile_config", None), "config", None)
    if isinstance(kept, dict):
        return dict(kept)
    return {"optimizer": getattr(model, "optimizer", None), "loss": getattr(model, "loss", None)}


def compile_args(est, model) -> CompileArgs:
    """Optimizer, loss and metrics from the Params, falling back to the model's own compile()."""
    import keras
    get = est.getOrDefault
    compiled = compiled_with(model)
    optimizer = get("optimizer") if get("optimizer") is not None else compiled.get("optimizer")
    if optimizer is None:
        raise ValueError("optimizer is not set and the model is not compiled: pass "
                         "optimizer=keras.optimizers.Adam(...) (or a name such as 'adam'), or compile the model first")
    if isinstance(optimizer, str):
        try:
            optimizer = keras.optimizers.get(optimizer)
        except ValueError as exc:
            raise ValueError("optimizer=%r is not a Keras optimizer name (%s)" % (optimizer, exc)) from None
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError("optimizer must be a keras.optimizers.Optimizer (Keras 3) or its name, got %s"
                         % type(optimizer).__name__)
    loss = get("loss") if get("loss") is not None else compiled.get("loss")
    if loss is None:
        raise ValueError("loss is not set and the model is not compiled: pass loss= a Keras loss name (e.g. "
                         "'sparse_categorical_crossentropy'), a keras.losses.Loss, or a function(y_true, y_pred)")
    _check_losses(loss)
    # A model compiled with several outputs may hold a dict or nested lists: kept as Keras got them.
    metrics = list(get("metrics") or []) or compiled.get("metrics") or []
    for metric in _leaves(metrics):
        if not (isinstance(metric, (str, keras.metrics.Metric)) or callable(metric)):
            raise ValueError("metrics: %r is neither a Keras metric name, a keras.metrics.Metric nor a function"
                             % (metric,))
    extra = {k: compiled[k] for k in ("run_eagerly", "steps_per_execution") if compiled.get(k) is not None}
    # Horovod's loss_weights (one per label column, so per model output) as Keras' compile() takes them.
    loss_weights = get("loss_weights")
    if loss_weights is None:
        loss_weights = compiled.get("loss_weights")
    elif isinstance(loss_weights, (list, tuple)):
        loss_weights = list(loss_weights)
    return CompileArgs(type(optimizer), optimizer.get_config(), loss, metrics, loss_weights,
                       compiled.get("weighted_metrics"), extra)


def _leaves(value):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _check_losses(loss) -> None:
    import keras
    for leaf in _leaves(loss):
        if isinstance(leaf, str):
            try:
                keras.losses.get(leaf)
            except ValueError:
                raise ValueError("loss=%r is not a Keras loss name; use e.g. 'mse' or "
                                 "'sparse_categorical_crossentropy', or pass a function" % (leaf,)) from None
        elif not callable(leaf):
            raise ValueError("loss must be a Keras loss name, a keras.losses.Loss or a function(y_true, y_pred) "
                             "(or a list/dict of them, one per output); got %r" % (leaf,))


def compression_name(value) -> str:
    """'none' / 'fp16' for the gradient_compression param (None, a name, or a Compression class)."""
    def load():
        from horovod_spark.tensorflow.compression import Compression
        return Compression
    return _shared.compression_name(value, load, "horovod_spark.keras.Compression.fp16")


def check_model(est):
    """(model, custom_objects, model bytes): the model must be a built Keras 3 model that loads back
    from its bytes with ``custom_objects``, which is checked here rather than on every rank."""
    import keras

    from horovod_spark.tensorflow.keras_optimizer import check_backend
    try:
        check_backend()
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None
    model = est.getOrDefault("model")
    if model is None:
        raise ValueError("model is not set: pass model=<keras.Model>")
    if not isinstance(model, keras.Model):
        raise ValueError("model must be a keras.Model (Keras 3), got %s" % type(model).__name__)
    if not model.built:
        raise ValueError("model is not built, so its weights do not exist yet: give it an input (keras.Input(shape=...)"
                         " as its first layer) or call model.build(input_shape) before fitting")
    if not model.trainable_weights:
        raise ValueError("model has no trainable weights: nothing to train")
    custom_objects = est.getOrDefault("custom_objects") or {}
    if not isinstance(custom_objects, dict) or not all(isinstance(k, str) for k in custom_objects):
        raise ValueError("custom_objects must be a dict of name -> class or function, got %r" % (custom_objects,))
    try:
        data = model_to_bytes(model)
    except Exception as exc:
        raise ValueError("the model cannot be saved in the Keras format (%s: %s); custom layers need get_config() "
                         "for their constructor arguments" % (type(exc).__name__, exc)) from exc
    try:
        model_from_bytes(data, custom_objects)
    except Exception as exc:
        raise ValueError("the model does not load back from the Keras format (%s: %s). Pass its custom layers, "
                         "models and functions as custom_objects={'Name': Class, ...}"
                         % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")) from exc
    return model, custom_objects, data


def check_and_pack(est, cfg):
    """Check the Keras Params; return (payload bytes, signature dict)."""
    import keras
    model, custom_objects, data = check_model(est)
    args = compile_args(est, model)
    if est.getOrDefault("loss_weights") is not None and not isinstance(est.getOrDefault("loss_weights"), dict):
        _shared.loss_weights(est.getOrDefault("loss_weights"), cfg.label_cols)  # a dict names outputs: Keras checks
    compression = compression_name(est.getOrDefault("gradient_compression"))
    for cb in cfg.callbacks:
        if not isinstance(cb, keras.callbacks.Callback):
            raise ValueError("callbacks: KerasEstimator takes keras.callbacks.Callback objects, got %s"
                             % type(cb).__name__)
    checkpoint_callback = est.getOrDefault("checkpoint_callback")
    if checkpoint_callback is not None and not isinstance(checkpoint_callback, keras.callbacks.ModelCheckpoint):
        raise ValueError("checkpoint_callback must be a keras.callbacks.ModelCheckpoint (e.g. horovod_spark.keras."
                         "callbacks.BestModelCheckpoint(monitor='val_loss')), got %s"
                         % type(checkpoint_callback).__name__)
    parts = {
        "model": data,
        "compile": _shared.pickled("optimizer/loss/metrics", args),
        "custom_objects": _shared.pickled("custom_objects", custom_objects),
        "callbacks": _shared.pickled("callbacks", cfg.callbacks),
        "checkpoint_callback": _shared.pickled("checkpoint_callback", checkpoint_callback),
        "transformation_fn": _shared.pickled("transformation_fn", cfg.transformation_fn),
        "compression": compression,
    }
    signature = {
        "framework": "keras",
        "model_class": "%s.%s" % (type(model).__module__, type(model).__qualname__),
        # Shapes, not names: Keras numbers layer names per process (dense, dense_1, ...).
        "weights": [list(w.shape) for w in model.weights],
        "optimizer_class": "%s.%s" % (args.optimizer_cls.__module__, args.optimizer_cls.__qualname__),
    }
    return cloudpickle.dumps(parts), signature


def unpack(payload: bytes) -> dict:
    parts = cloudpickle.loads(payload)
    # The model stays bytes: keras_io loads it, with the custom objects.
    return {k: (cloudpickle.loads(v) if isinstance(v, bytes) and k != "model" else v) for k, v in parts.items()}

