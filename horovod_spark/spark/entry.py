"""``horovod_spark.run``: run a function as ``num_proc`` Horovod ranks in one Spark barrier stage,
a barrier job of the SparkContext from a classic session (``barrier/``), a barrier
``mapInPandas`` stage from a Spark Connect client (``connect/``)."""
from typing import Any, Callable, Dict, Iterable, List, Optional

from horovod_spark import session as spark_session
from horovod_spark.spark.barrier.run import run_barrier
from horovod_spark.spark.run_options import SparkRunOptions


def run(fn: Callable, args=(), kwargs: Optional[dict] = None, num_proc: Optional[int] = None,
        start_timeout: Optional[float] = None, use_mpi: Optional[bool] = None, use_gloo: Optional[bool] = None,
        extra_mpi_args: Optional[str] = None, env: Optional[Dict[str, str]] = None, stdout=None,
        stderr=None, verbose: int = 1, nics: Optional[Iterable[str]] = None,
        prefix_output_with_timestamp: bool = False, executable: Optional[str] = None) -> List[Any]:
    """Run ``fn(*args, **kwargs)`` as ``num_proc`` ranks in one Spark barrier stage.

    Returns fn's return values as a list indexed by rank. Inside fn, ``hvd.init()`` needs no
    arguments. Each rank runs in its own process started by its Spark task; its stdout/stderr
    lines are printed on the driver as they come, prefixed ``[rank]<stdout>:`` (to ``stdout`` /
    ``stderr`` if given: any object with ``write(str)``). An exception on any rank cancels the
    job and raises ``RankFailedError`` with the rank and remote traceback; ranks that do not all
    start within ``start_timeout`` (default ``HOROVOD_SPARK_START_TIMEOUT`` or 600 s) raise
    ``StartTimeoutError`` naming them. ``env`` adds environment variables to every rank.
    ``use_mpi=True`` starts the ranks with mpirun through the Spark tasks (see docs/spark.md),
    with ``extra_mpi_args`` added to its command line; ``use_gloo=True`` (Horovod's name for its
    own TCP transport) asks for this project's shared-memory/TCP links, the default. ``nics``:
    network interface names the ranks talk over (the first with an IPv4 address on each host).
    ``executable``: the Python interpreter that runs the ranks on the executors (default: the
    executor's own). The parameters are horovod.spark.run's, in its order.
    """
    options = SparkRunOptions.from_kwargs(
        "horovod_spark.run", num_proc=num_proc, start_timeout=start_timeout, use_mpi=use_mpi, use_gloo=use_gloo,
        extra_mpi_args=extra_mpi_args, env=env, stdout=stdout, stderr=stderr, verbose=verbose, nics=nics,
        prefix_output_with_timestamp=prefix_output_with_timestamp, executable=executable)
    return run_with_options(fn, args, kwargs, options)


def run_with_options(fn: Callable, args, kwargs: Optional[dict], options: SparkRunOptions) -> List[Any]:
    """``run``'s body for callers that built and checked the options already: a Spark Connect stage
    from a Spark Connect session, else a barrier job of the classic SparkContext."""
    remote = spark_session.connect_session_in_use()
    if remote is not None:
        from horovod_spark.spark.connect.run import run_connect
        return run_connect(remote, fn, args, kwargs, options)
    return run_barrier(fn, args, kwargs, options)
