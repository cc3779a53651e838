"""Worker-side functions of KerasModel.transform(), importable so the UDF closure stays small."""
import os

import numpy as np


def load_model(data: bytes):
    """The model from KerasModel bytes (a keras_io bundle), in a Spark Python worker."""
    _configure_tensorflow()
    from .keras_io import unbundle
    return unbundle(data)[0]


def predict(model, inputs):
    """One Arrow batch's features -> the model's outputs as numpy arrays, one per output."""
    import keras
    floatx = keras.config.floatx()
    arrays = [a.astype(floatx, copy=False) if a.dtype.kind in "fb" else a for a in map(np.asarray, inputs)]
    result = model.predict_on_batch(arrays[0] if len(arrays) == 1 else arrays)
    outputs = list(result) if isinstance(result, (list, tuple)) else [result]
    return [np.asarray(o) for o in outputs]


def _configure_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    # Spark runs one Python worker per task slot and sets OMP_NUM_THREADS to the task's cores;
    # TensorFlow's own pools ignore it and would each take every core of the executor.
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass  # TensorFlow already runs in this worker (an earlier model); its pools stay
