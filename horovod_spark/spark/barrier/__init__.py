"""``horovod_spark.run`` from a classic SparkSession: one barrier job of the SparkContext (``job``),
started and watched from the driver (``run``) until it ends one way or another (``outcome``)."""
