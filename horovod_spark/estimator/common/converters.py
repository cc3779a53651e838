"""TypeConverters for the estimator Params that pyspark's own converters cannot express.

They raise TypeError like pyspark's, which pyspark re-raises naming the param. Range checks
(batch_size >= 1, fractions in (0, 1), ...) are not done here but at fit time, in checks.py,
so that a value can be set in any order and every problem is reported with its fix.
"""
import numbers
import warnings

from pyspark.ml.param import TypeConverters


def to_optional_int(value):
    return None if value is None else TypeConverters.toInt(value)


def to_column_list(value):
    """A column name or a list of them -> list of str (a bare string is one column, not letters)."""
    if isinstance(value, str):
        return [value]
    return TypeConverters.toListString(value)


def to_validation(value):
    """A fraction (float) or the name of a column (str)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("validation must be a fraction such as 0.1 or a column name, got %r" % (value,))
    return float(value)


def to_shuffle(value):
    """True/False, or a shuffle buffer size in rows (0 means no shuffling)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    raise TypeError("shuffle must be True/False or a buffer size in rows, got %r" % (value,))


def to_shapes(value):
    """A list of per-row shapes, one per column: [[64], [8, 8]]; a flat [64] is one shape."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise TypeError("shapes must be a list of per-row shapes such as [[64]] or [[1, 8, 8]], got %r" % (value,))
    if value and all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in value):
        value = [value]
    shapes = []
    for shape in value:
        if not isinstance(shape, (list, tuple)) or not all(
                isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in shape):
            raise TypeError("each shape must be a list of ints (the shape of one row), got %r" % (shape,))
        shape = [int(d) for d in shape]
        if len(shape) > 1 and shape[0] == -1:
            # horovod.spark.torch's form includes the batch dimension ([-1, 1, 28, 28]); a per-row
            # shape would hardly infer its leading dimension, so read it as that form.
            warnings.warn("shape %r read as Horovod's batch-first form: per-row shape %r" % (shape, shape[1:]),
                          stacklevel=4)
            shape = shape[1:]
        shapes.append(shape)
    return shapes


def to_store(value):
    """A Store, or a path/URL for Store.create."""
    from horovod_spark.store import Store
    if isinstance(value, Store):
        return value
    if isinstance(value, str):
        return Store.create(value)
    raise TypeError("store must be a horovod_spark.store.Store or a path/URL, got %s" % type(value).__name__)


def to_list(value):
    """One object or a list of them -> list (metrics, callbacks)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]
