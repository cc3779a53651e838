"""Batch inference inside Spark's Python workers for Model.transform().

One Arrow UDF call receives the feature columns of a whole Arrow batch (thousands of rows) as
one struct array; the columns become numpy arrays without per-row Python work, the model runs
once per batch, and its outputs go back as Arrow arrays. The deserialized model is cached per
worker process under the model's content key, so Spark's worker reuse pays the (possibly
large) deserialization once per worker, not once per task, batch or row.
"""
import collections
import threading
from typing import Callable, List, Optional, Sequence

import numpy as np
import pyarrow as pa

_CACHE_SIZE = 4
_cache: "collections.OrderedDict[str, object]" = collections.OrderedDict()
_cache_lock = threading.Lock()


def cached_model(key: str, data: bytes, loader: Callable[[bytes], object]):
    """The model for ``key``, deserialized from ``data`` by ``loader`` at most once per process
    (while it stays among the ``_CACHE_SIZE`` most recently used)."""
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    model = loader(data)
    with _cache_lock:
        _cache[key] = model
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return model


def column_to_numpy(array: pa.Array, name: str = "") -> np.ndarray:
    """A scalar column -> 1-D array; a list column (fixed length per row) -> 2-D (rows, n).
    ``name`` (the feature column) is for error messages."""
    what = "feature column %r" % name if name else "a feature column"
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
        rows = len(array)
        if array.null_count:
            raise ValueError("transform() found null rows in %s: drop them (df.dropna(subset=[...])) or fill "
                             "them first" % what)
        if not pa.types.is_fixed_size_list(array.type) and rows:
            widths = np.diff(array.offsets.to_numpy())
            if np.any(widths != widths[0]):
                raise ValueError("transform() found feature arrays of different lengths in one column; the model "
                                 "needs a fixed length per row")
        values = array.flatten()
        width = len(values) // rows if rows else 0
        return values.to_numpy(zero_copy_only=False).reshape(rows, width)
    if array.null_count:
        raise ValueError("transform() found null values in %s: drop them (df.dropna(subset=[...])) or fill "
                         "them first" % what)
    return array.to_numpy(zero_copy_only=False)


# How outputs_to_arrow writes each array: one value per row as a double (what Spark ML
# evaluators expect of a prediction), or a flat list per row of float32 (a model's output) or of
# float64 (the classifier columns).
DOUBLE, FLOATS, DOUBLES = "double", "floats", "doubles"


def outputs_to_arrow(outputs: Sequence[np.ndarray], kinds: Sequence[str], names: Sequence[str]) -> pa.Array:
    """Model outputs -> one Arrow array (a struct of them when there are several), each written as
    its kind says (DOUBLE, FLOATS or DOUBLES)."""
    arrays = []
    for values, kind in zip(outputs, kinds):
        rows = values.shape[0]
        if kind == DOUBLE:
            arrays.append(pa.array(values.reshape(rows).astype(np.float64, copy=False)))
        else:
            flat = np.ascontiguousarray(values.reshape(rows, -1), dtype=np.float64 if kind == DOUBLES else np.float32)
            width = flat.shape[1]
            offsets = pa.array(np.arange(0, (rows + 1) * width, width, dtype=np.int32))
            arrays.append(pa.ListArray.from_arrays(offsets, pa.array(flat.reshape(-1))))
    if len(arrays) == 1:
        return arrays[0]
    return pa.StructArray.from_arrays(arrays, names=list(names))


def make_predict_udf(key: str, data: bytes, loader: Callable, predict: Callable, input_shapes,
                     kinds: List[str], names: List[str], return_type, classification: Optional[str] = None):
    """The Arrow UDF for Model.transform(). ``loader(bytes) -> model`` and
    ``predict(model, [numpy inputs]) -> [numpy outputs]`` are the framework's; both must be
    importable functions so the closure stays small. ``kinds`` and ``names`` cover the model's
    outputs, then, with ``classification``, the three classifier columns derived from its output."""
    from .classifier_columns import derive
    from .shapes import model_inputs
    from .spark_compat import scalar_iter_arrow_udf
    expected = len(names) - (3 if classification else 0)

    def predict_batches(batches):
        model = cached_model(key, data, loader)
        for struct in batches:
            if isinstance(struct, pa.ChunkedArray):
                struct = struct.combine_chunks()
            # flatten(), unlike field(i), honours the struct's own slice offset.
            columns = [column_to_numpy(a, f.name) for a, f in zip(struct.flatten(), struct.type)]
            outputs = predict(model, model_inputs(columns, input_shapes))
            if len(outputs) != expected:
                raise ValueError("the model returned %d output(s) but there are %d output column(s) (%s): return one "
                                 "output per label column" % (len(outputs), expected, names[:expected]))
            if classification:
                outputs = list(outputs) + list(derive(outputs[0], classification))
            yield outputs_to_arrow(outputs, kinds, names)

    # spark_compat: arrow_udf on pyspark >= 4.1; a pandas UDF around the same function on the
    # older stack (pyspark 3.5), which has no arrow_udf.
    udf = scalar_iter_arrow_udf(predict_batches, return_type)
    # Non-deterministic: Spark then evaluates it once per row even when several output columns
    # are read from its struct (a deterministic UDF may be inlined into each of them).
    return udf.asNondeterministic()
