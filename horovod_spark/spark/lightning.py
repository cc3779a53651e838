"""``horovod_spark.spark.lightning``: Horovod's path to the Lightning estimator
(``horovod.spark.lightning``); ``TorchEstimator`` / ``TorchModel`` are ``horovod_spark.estimator``'s
``LightningEstimator`` / ``LightningModel``, imported on first use."""
_NAMES = {"TorchEstimator": "LightningEstimator", "TorchModel": "LightningModel"}
__all__ = sorted(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    from horovod_spark import estimator
    value = getattr(estimator, _NAMES[name])
    globals()[name] = value
    return value
