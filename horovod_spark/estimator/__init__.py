"""Spark ML estimators that train with horovod_spark on DataFrames: ``TorchEstimator`` -> ``TorchModel``,
``KerasEstimator`` -> ``KerasModel``, ``LightningEstimator`` -> ``LightningModel`` (a
``lightning.pytorch.LightningModule``; Horovod's ``horovod.spark.lightning.TorchEstimator``).

Names resolve on first use, so importing this package loads neither torch, TensorFlow nor pyspark.ml.
"""
_EXPORTS = {
    "TorchEstimator": "horovod_spark.estimator.torch_estimator",
    "TorchModel": "horovod_spark.estimator.torch_model",
    "KerasEstimator": "horovod_spark.estimator.keras_estimator",
    "KerasModel": "horovod_spark.estimator.keras_model",
    "LightningEstimator": "horovod_spark.estimator.lightning_estimator",
    "LightningModel": "horovod_spark.estimator.lightning_model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    import importlib
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
