"""Horovod's ``horovod.spark.common`` paths, so that a ported estimator script changes only ``horovod.`` to
``horovod_spark.``: ``backend`` (``SparkBackend``, ``Backend``) and ``store`` (the ``horovod_spark.store`` classes).
"""
