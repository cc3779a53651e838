"""Databricks' ``HorovodRunner`` on ``horovod_spark.run`` (``horovod_runner``), and what reaches its
notebook cell: ``log_to_driver`` and the driver's line filter (``driver_log``), the Keras
``LogCallback`` (``log_callback``)."""
