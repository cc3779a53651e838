"""Reader batches -> the tf.data pipelines Keras' ``fit`` consumes on a rank.

Features go through the same ``model_inputs`` as TorchEstimator and ``KerasModel.transform``, so
the model sees one input layout in training and inference. Floating and boolean arrays become
Keras' float type; integer labels stay integers, as sparse losses want them.
"""
from typing import Tuple

import numpy as np

from .common.rank_data import val_batches
from .common.shapes import label_arrays, model_inputs


def declared_input_shapes(model, count: int):
    """Per-row shapes of the model's inputs when it declares them fully (``keras.Input((8, 8, 1))``)
    for ``count`` feature columns, else None. Horovod's KerasEstimator reshapes each feature to its
    input this way, so a 64-value vector column feeds an (8, 8, 1) image input without input_shapes."""
    try:
        inputs = list(model.inputs or [])
    except (AttributeError, ValueError):  # a subclassed model that was never called
        return None
    if len(inputs) != count:
        return None
    shapes = [list(t.shape[1:]) for t in inputs]
    if any(d is None for shape in shapes for d in shape):
        return None
    return shapes


def input_shapes_for(model, input_shapes, count: int):
    """The per-row feature shapes a Keras model is fed: ``input_shapes`` when given, else the model's
    declared input shapes (None when it has no model or declares them only partly). The estimator,
    its remote training and KerasModel.transform all decide it here, so they always agree."""
    if input_shapes:
        return input_shapes
    return None if model is None else declared_input_shapes(model, count)


def keras_batch(batch: dict, spec, floatx: str) -> tuple:
    """(x, y) or (x, y, sample_weight); x and y are one array, or a tuple with one per column."""
    features = model_inputs([batch[c] for c in spec.feature_cols], spec.input_shapes)
    labels = label_arrays([batch[c] for c in spec.label_cols], spec.label_shapes)
    x = _one_or_tuple([_as_float(a, floatx) for a in features])
    y = _one_or_tuple([_as_float(a, floatx) for a in labels])
    if spec.sample_weight_col:
        return x, y, np.asarray(batch[spec.sample_weight_col], dtype=floatx).reshape(-1)
    return x, y


def train_dataset(reader, spec, floatx: str, start_epoch: int, num_epochs: int):
    """(dataset, reader iterator, first Keras batch). One reader iterator serves every epoch, as
    ``fit`` with ``steps_per_epoch`` keeps one iterator for all of them; the caller closes it. The
    first batch is read here, for the dataset's signature."""
    import tensorflow as tf
    batches = reader.iter_batches(start_epoch, num_epochs)
    try:
        first = keras_batch(next(batches), spec, floatx)
    except BaseException:
        batches.close()
        raise

    def generate():
        yield first
        for batch in batches:
            yield keras_batch(batch, spec, floatx)

    return tf.data.Dataset.from_generator(generate, output_signature=signature(first)), batches, first


def val_dataset(reader, spec, floatx: str, rank: int, size: int, batch_signature):
    """Each evaluation (once per epoch) calls the generator afresh and gets this rank's validation
    shard (see rank_data.val_batches); the rows are the same every epoch."""
    import tensorflow as tf

    def generate():
        for batch in val_batches(reader, 0, rank, size, spec.validation_steps_per_epoch):
            yield keras_batch(batch, spec, floatx)

    return tf.data.Dataset.from_generator(generate, output_signature=batch_signature)


def signature(example: tuple):
    """TensorSpecs of a Keras batch, the batch dimension left open (the last validation batch is short)."""
    import tensorflow as tf
    return tf.nest.map_structure(lambda a: tf.TensorSpec((None,) + a.shape[1:], tf.as_dtype(a.dtype)), example)


def _as_float(values, floatx: str) -> np.ndarray:
    values = np.asarray(values)
    return values.astype(floatx, copy=False) if values.dtype.kind in "fb" else values


def _one_or_tuple(arrays) -> Tuple:
    return arrays[0] if len(arrays) == 1 else tuple(arrays)
