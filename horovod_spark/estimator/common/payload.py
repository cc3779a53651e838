"""Pieces shared by the Torch and Keras payload builders: shipping user objects to the ranks, and
reading the gradient_compression and loss_weights params."""
import numbers

from horovod_spark.common import source_pickle

COMPRESSIONS = ("none", "fp16")


def pickled(name: str, value) -> bytes:
    """cloudpickle ``value`` (by-value code with its source lines, for the ranks' tracebacks), or a
    ValueError that says which param cannot travel and why."""
    try:
        return source_pickle.dumps(value)
    except Exception as exc:
        raise ValueError("%s cannot be sent to the ranks: cloudpickle failed with %s: %s. Objects such as locks, "
                         "open files, sockets or SparkSessions cannot travel; create them inside the function, or "
                         "define classes in an importable module" % (name, type(exc).__name__, exc)) from exc


def compression_name(value, compression_cls_loader, hint: str) -> str:
    """'none' / 'fp16' for the gradient_compression param: None, a name, or one of the framework's
    Compression classes (``compression_cls_loader()`` imports it only when needed)."""
    if value is None:
        return "none"
    if isinstance(value, str):
        if value.lower() in COMPRESSIONS:
            return value.lower()
    else:
        compression = compression_cls_loader()
        for name in COMPRESSIONS:
            if value is getattr(compression, name):
                return name
    raise ValueError("gradient_compression=%r: use None, 'fp16', or %s" % (value, hint))


def loss_weights(value, label_cols):
    """The loss_weights param as one float per label column (None: not set)."""
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and len(label_cols) == 1:
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(w, numbers.Real) and not isinstance(w, bool)
                                                       for w in value):
        raise ValueError("loss_weights=%r: pass a list of numbers, one weight per label column %s"
                         % (value, list(label_cols)))
    if len(value) != len(label_cols):
        raise ValueError("loss_weights: %d weight(s) for %d label column(s) %s: give one per label column"
                         % (len(value), len(label_cols), list(label_cols)))
    return [float(w) for w in value]
