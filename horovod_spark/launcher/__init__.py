"""Run N ranks on this machine: ``run_local(fn, num_proc=N)`` and the ``horovod-spark-run`` command.

``cli``: the command line (also ``python -m horovod_spark.launcher``); ``local_job``: a job's KV
service plus its supervised rank processes, and ``run_local``; ``supervisor``: starting, watching and
stopping the rank processes; ``run_local_rank``: what each rank of ``run_local`` runs;
``elastic_job`` and ``elastic_driver``: ``run_elastic_local``, an elastic job of local ranks.
"""


def __getattr__(name):
    # Resolved on use, so a rank process importing run_local_rank does not import the driver side.
    if name in ("run_local", "LocalJob"):
        from horovod_spark.launcher import local_job
        return getattr(local_job, name)
    if name == "run_elastic_local":
        from horovod_spark.launcher import elastic_job
        return elastic_job.run_elastic_local
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["run_local", "LocalJob", "run_elastic_local"]
