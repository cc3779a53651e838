"""Horovod's ``horovod.spark.common`` paths, so that a ported estimator script changes only ``horovod.`` to
``horovod_spark.``: ``backend`` (``SparkBackend``, ``Backend``), ``store`` (the ``horovod_spark.store`` classes) and
``util`` (``prepare_data`` and the dataset indices it hands out).
"""
