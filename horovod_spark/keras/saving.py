"""load_model: restore a model saved with a DistributedOptimizer, optimizer re-wrapped."""
import keras

from horovod_spark.tensorflow.compression import Compression
from horovod_spark.tensorflow.keras_optimizer import check_backend, distributed_class, is_distributed, make_settings


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none,
               legacy_opts=False):
    """``keras.models.load_model`` whose compiled optimizer comes back as a DistributedOptimizer.

    A DistributedOptimizer saves as its plain optimizer class, so the file loads with Keras
    alone too; here the loaded optimizer (slot variables and iteration count included) is then
    made distributed in place, with ``compression``. ``custom_optimizers``: optimizer classes of
    your own that the file refers to (added to ``custom_objects`` under their class names).
    ``legacy_opts`` is Horovod's switch to tf.keras' legacy optimizers, which Keras 3 does not have.
    """
    check_backend()
    if legacy_opts:
        raise ValueError("load_model(legacy_opts=True): Keras 3 has no legacy optimizers "
                         "(tf.keras.optimizers.legacy); load with legacy_opts=False")
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects.setdefault(cls.__name__, cls)
        objects.setdefault(keras.saving.get_registered_name(cls), cls)
    model = keras.models.load_model(filepath, custom_objects=objects)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not is_distributed(optimizer):
        # Swapping the class keeps the restored object, and so its restored state, as it is.
        object.__setattr__(optimizer, "__class__",
                           distributed_class(type(optimizer), make_settings(compression=compression)))
    return model
