"""``HorovodRunner``: Databricks' ``sparkdl.HorovodRunner`` on horovod_spark.

A notebook written for sparkdl ports by changing its import::

    from horovod_spark import HorovodRunner      # was: from sparkdl import HorovodRunner
    hr = HorovodRunner(np=2)
    result = hr.run(train, learning_rate=0.1)     # train(**kwargs) on 2 ranks; rank 0's return value

``np > 0`` runs ``main`` as ``np`` Spark barrier tasks (``horovod_spark.run``); ``np < 0`` runs
``-np`` processes on the driver alone (``horovod_spark.launcher.run_local``), for debugging with
no executors involved. See docs/migrating.md for what differs from sparkdl.
"""
import numbers
import sys
from typing import Any, Callable

from .driver_log import RankOutputFilter, check_verbosity


class HorovodRunner:
    """Runs a Horovod training function on ``np`` ranks and returns rank 0's result.

    ``np``: a positive number runs that many Spark barrier tasks (each takes one task slot: a
    GPU on a GPU cluster, a core on a CPU cluster; the job fails at once if the cluster has fewer
    free slots); a negative number runs ``-np`` processes on the driver (no Spark job; useful to
    debug a notebook before it takes the cluster). ``0`` is refused: sparkdl once meant "every
    task slot" by it; pass that number instead.

    ``driver_log_verbosity``: ``"all"`` (the default) prints every rank's stdout and stderr in the
    notebook cell as the lines arrive, prefixed ``[rank]<stream>:``; ``"log_callback_only"``
    (sparkdl's default) prints only what ranks send with ``horovod_spark.spark.log_to_driver`` or
    ``horovod_spark.spark.LogCallback`` and writes the rest to the driver process's own stderr
    (the driver log on Databricks, the kernel's console under Jupyter). Either way a failure on
    any rank raises here, with that rank's traceback. From a Spark Connect session the lines
    arrive when the job ends (see docs/spark.md, "Spark Connect").
    """

    def __init__(self, np: int, driver_log_verbosity: str = "all"):
        if isinstance(np, bool) or not isinstance(np, numbers.Integral):
            raise TypeError("np must be an integer number of processes (e.g. np=4, or np=-2 to run 2 on the "
                            "driver), got %r" % (np,))
        if np == 0:
            raise ValueError("np=0 is not supported: pass the number of processes, e.g. "
                             "np=spark.sparkContext.defaultParallelism to use every task slot, or a negative np "
                             "(np=-2) to run that many processes on the driver alone")
        self.num_processor = int(np)
        self.driver_log_verbosity = check_verbosity(driver_log_verbosity)

    def run(self, main: Callable[..., Any], **kwargs) -> Any:
        """Run ``main(**kwargs)`` on every rank; return rank 0's return value.

        ``main`` and ``kwargs`` are serialized with cloudpickle (keep large objects out of the
        closure: they slow the start). Inside ``main``, ``hvd.init()`` needs no arguments.
        Raises ``RankFailedError`` (with the rank's traceback) when any rank fails.
        """
        if not callable(main):
            raise TypeError("HorovodRunner.run needs the training function as its first argument, got %r" % (main,))
        out = RankOutputFilter(self.driver_log_verbosity)
        err = RankOutputFilter(self.driver_log_verbosity, cell=sys.stderr)
        try:
            if self.num_processor > 0:
                from horovod_spark.spark.entry import run_with_options
                from horovod_spark.spark.run_options import SparkRunOptions
                options = SparkRunOptions.from_kwargs("HorovodRunner", num_proc=self.num_processor, stdout=out,
                                                      stderr=err)
                results = run_with_options(main, (), kwargs, options)
            else:
                from horovod_spark.launcher.local_job import run_local_with_options
                from horovod_spark.launcher.options import LocalRunOptions
                options = LocalRunOptions.from_kwargs("HorovodRunner", num_proc=-self.num_processor, stdout=out,
                                                      stderr=err)
                results = run_local_with_options(main, (), kwargs, options)
        finally:
            out.close()
            err.close()
        return results[0]

    def __repr__(self):
        return "HorovodRunner(np=%d, driver_log_verbosity=%r)" % (self.num_processor, self.driver_log_verbosity)
