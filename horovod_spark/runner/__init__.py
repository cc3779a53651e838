"""Another name for ``horovod_spark.launcher``, which scripts and docs use:
``python -m horovod_spark.runner``, ``horovod_spark.runner.local.run_local``,
``horovod_spark.runner.errors.RankFailedError`` and ``horovod_spark.runner.launch.main`` (the entry
point of installed ``horovod-spark-run`` scripts) are the launcher's own objects."""
