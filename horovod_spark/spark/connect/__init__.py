"""``horovod_spark.run`` from a Spark Connect client: one barrier ``mapInPandas`` stage submitted
and read by the client (``run``), whose rank 0 task hosts the driver service (``task``)."""
