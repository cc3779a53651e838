"""``horovod_spark.run_elastic``: an elastic job in ordinary Spark tasks, driven from the driver
(``run``), one rank per task with heartbeats (``task``), the ranks' output shipped to the driver
(``output``)."""
