"""``horovod_spark.spark.keras``: Horovod's path to the Keras estimator (``horovod.spark.keras``); the
classes are ``horovod_spark.estimator``'s, imported on first use."""
_NAMES = ("KerasEstimator", "KerasModel")
__all__ = list(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    from horovod_spark import estimator
    value = getattr(estimator, name)
    globals()[name] = value
    return value
