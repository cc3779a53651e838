"""MPI mode of ``horovod_spark.run``: mpirun on the driver (``launch``), its remote-shell agent
(``agent``) and the daemon it starts inside each Spark task (``task``)."""
