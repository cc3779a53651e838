"""Keras models as bytes: how a KerasEstimator's model travels to the ranks and back, and how a
KerasModel is saved.

The bytes are a Keras 3 ``.keras`` file (architecture + weights) without the compile state: the
estimator sends optimizer, loss and metrics separately (cloudpickled, so lambdas and notebook
functions travel), and Keras would otherwise try to serialize them into the file by name, which
fails for a lambda loss. Custom layers need ``custom_objects`` to load, as with Keras itself.
"""
import contextlib
import os
import tempfile
import warnings

import cloudpickle

BUNDLE_FORMAT = 1
_FILE = "model.keras"


def model_to_bytes(model) -> bytes:
    with tempfile.TemporaryDirectory(prefix="hs-keras-") as directory:
        path = os.path.join(directory, _FILE)
        with _without_compile_config(model):
            model.save(path)
        with open(path, "rb") as f:
            return f.read()


def model_from_bytes(data: bytes, custom_objects=None):
    """The uncompiled model saved by ``model_to_bytes``."""
    import keras
    with tempfile.TemporaryDirectory(prefix="hs-keras-") as directory:
        path = os.path.join(directory, _FILE)
        with open(path, "wb") as f:
            f.write(data)
        with warnings.catch_warnings():
            # The file may hold a built optimizer's variables, which an uncompiled load skips.
            warnings.filterwarnings("ignore", message=".*[Ss]kipping variable loading for optimizer.*")
            # safe_mode=False: Lambda layers carry Python bytecode. The bytes come from the user's own
            # model through their own store, as trusted as the cloudpickled objects beside them.
            return keras.models.load_model(path, custom_objects=custom_objects or None, compile=False,
                                           safe_mode=False)


def bundle(model, custom_objects) -> bytes:
    """What a KerasModel saves: the model and the custom objects needed to load it, so that
    ``KerasModel.load`` works in a fresh process without being told them again."""
    return cloudpickle.dumps({"format": BUNDLE_FORMAT, "keras": model_to_bytes(model),
                              "custom_objects": dict(custom_objects or {})})


def unbundle(data: bytes):
    """(model, custom_objects) from ``bundle`` bytes."""
    doc = cloudpickle.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != BUNDLE_FORMAT:
        raise ValueError("these bytes are not a horovod_spark Keras model bundle (format %r, expected %r)"
                         % (doc.get("format") if isinstance(doc, dict) else type(doc).__name__, BUNDLE_FORMAT))
    return model_from_bytes(doc["keras"], doc["custom_objects"]), doc["custom_objects"]


@contextlib.contextmanager
def _without_compile_config(model):
    if not getattr(model, "compiled", False):
        yield
        return
    # Shadows the method on this instance for the duration of save() only: Keras asks the model
    # for it while serializing, and an instance attribute takes precedence over the class's.
    model.get_compile_config = lambda: None
    try:
        yield
    finally:
        del model.get_compile_config
