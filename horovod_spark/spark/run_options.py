"""The options of a job on Spark, checked before any Spark job starts.

``run``, ``run_elastic``, ``SparkBackend``, ``HorovodRunner`` and the estimators' fit each build one
of these from their arguments and pass it down; each option is checked here once, in one wording
that names the call that got it (the number of ranks, the elastic sizes and the ranks' environment
with the launcher's own checks, ``horovod_spark.launcher.options``). Defaults that come from the
driver's environment (HOROVOD_SPARK_START_TIMEOUT, HOROVOD_SPARK_USE_MPI, ...) are read when the
options are built, so a bad value fails there too.
"""
import dataclasses
import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from horovod_spark.common import config
from horovod_spark.launcher.options import check_num_proc, check_rank_env, check_reset_limit, elastic_sizes


def _start_timeout(value) -> float:
    if value is None:
        return config.SPARK_START_TIMEOUT.get()
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError("start_timeout must be a number of seconds, got %r" % (value,)) from None
    if not value > 0:
        raise ValueError("start_timeout must be > 0 seconds, got %r" % (value,))
    return value


def with_stall_shutdown(rank_env: Dict[str, str]) -> Dict[str, str]:
    """The ranks' HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: the job's env, else the driver's, else the
    Spark default. The core's own default (0) only warns, and on Spark a collective some rank never
    joins would then hold the cluster's task slots forever."""
    variable = config.STALL_SHUTDOWN_TIME_SECONDS
    if not rank_env.get(variable.name):
        variable.get()  # a bad value on the driver is refused here, naming the variable
        rank_env[variable.name] = variable.raw() or repr(config.SPARK_STALL_SHUTDOWN_TIME.get())
    return rank_env


def _use_mpi(use_mpi, use_gloo) -> bool:
    if use_mpi and use_gloo:
        raise ValueError("use_mpi=True and use_gloo=True ask for two different transports; pass one of them")
    if use_gloo:
        return False
    if use_mpi is None:
        return config.SPARK_USE_MPI.get()
    return bool(use_mpi)


def _extra_mpi_args(value, use_mpi: bool) -> Optional[Tuple[str, ...]]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("extra_mpi_args must be a string of mpirun arguments, got %s" % type(value).__name__)
    if not use_mpi:
        raise ValueError("extra_mpi_args=%r needs use_mpi=True (without MPI no mpirun runs to take them)" % value)
    return tuple(shlex.split(value))


def _nics(value) -> Tuple[str, ...]:
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else list(value)
    if not names or any(not isinstance(n, str) or not n.strip() or "," in n for n in names):
        raise ValueError("nics must be network interface names such as ['eth0'], got %r" % (value,))
    return tuple(n.strip() for n in names)


def _executable(value) -> Optional[str]:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError("executable must be the path of a Python interpreter on the executors, got %r" % (value,))
    return value


def _with_nics(rank_env: Dict[str, str], nics: Tuple[str, ...]) -> Dict[str, str]:
    if nics:
        rank_env[config.GLOO_IFACE.name] = ",".join(nics)
    return rank_env


@dataclass(frozen=True)
class OutputOptions:
    """Where the driver prints the ranks' lines (any objects with ``write(str)``; None: ours), with a
    timestamp or not, and how much of its own it says (``verbose``)."""
    stdout: Any = None
    stderr: Any = None
    verbose: int = 1
    prefix_output_with_timestamp: bool = False


@dataclass(frozen=True)
class SparkRunOptions:
    """What ``horovod_spark.run`` runs: ``num_proc`` ranks (None: the session's default
    parallelism, see ``with_default_num_proc``), each with ``rank_env`` added to its environment
    (the user's env, the stall shutdown and the ``nics``), started within ``start_timeout``
    seconds, over MPI (``use_mpi``, with ``mpi_args`` for mpirun) or our own transport, by
    ``executable`` (None: the executor's Python)."""
    caller: str
    num_proc: Optional[int]
    start_timeout: float
    rank_env: Dict[str, str] = field(default_factory=dict)
    use_mpi: bool = False
    mpi_args: Optional[Tuple[str, ...]] = None
    nics: Tuple[str, ...] = ()
    executable: Optional[str] = None
    output: OutputOptions = OutputOptions()

    @classmethod
    def from_kwargs(cls, caller: str, num_proc=None, start_timeout=None, use_mpi=None, use_gloo=None,
                    extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose: int = 1, nics=None,
                    prefix_output_with_timestamp: bool = False, executable=None) -> "SparkRunOptions":
        """``horovod_spark.run``'s arguments, checked; ``caller`` names the call in error messages."""
        num_proc = check_num_proc(num_proc, caller, none_means="the session's default parallelism")
        start_timeout = _start_timeout(start_timeout)
        rank_env = with_stall_shutdown(check_rank_env(env, caller))
        use_mpi = _use_mpi(use_mpi, use_gloo)
        mpi_args = _extra_mpi_args(extra_mpi_args, use_mpi)
        nics = _nics(nics)
        return cls(caller=caller, num_proc=num_proc, start_timeout=start_timeout,
                   rank_env=_with_nics(rank_env, nics), use_mpi=use_mpi, mpi_args=mpi_args, nics=nics,
                   executable=_executable(executable),
                   output=OutputOptions(stdout, stderr, verbose, prefix_output_with_timestamp))

    def with_default_num_proc(self, default: int) -> "SparkRunOptions":
        """These options with ``num_proc`` set to ``default`` (the session's default parallelism)
        unless it was given."""
        if self.num_proc is not None:
            return self
        return dataclasses.replace(self, num_proc=check_num_proc(default, self.caller))


@dataclass(frozen=True)
class ElasticSparkOptions:
    """What ``horovod_spark.run_elastic`` runs: ``num_proc`` ranks (None: the session's default
    parallelism, see ``with_default_num_proc``) that may shrink to ``min_num_proc`` and grow back
    to ``max_num_proc`` (None: ``num_proc``) within ``reset_limit`` resets (None: unlimited), each
    reset waiting at most ``elastic_timeout`` seconds; ``start_timeout`` for the first ranks."""
    caller: str
    num_proc: Optional[int]
    min_num_proc: Optional[int]
    max_num_proc: Optional[int]
    reset_limit: Optional[int]
    start_timeout: float
    elastic_timeout: float
    rank_env: Dict[str, str] = field(default_factory=dict)
    executable: Optional[str] = None
    output: OutputOptions = OutputOptions()

    @classmethod
    def from_kwargs(cls, caller: str, num_proc=None, min_num_proc=None, max_num_proc=None, start_timeout=None,
                    elastic_timeout=None, reset_limit=None, env=None, stdout=None, stderr=None, verbose: int = 1,
                    nics=None, prefix_output_with_timestamp: bool = False, min_np=None, max_np=None,
                    executable=None) -> "ElasticSparkOptions":
        """``horovod_spark.run_elastic``'s arguments, checked (``min_np``/``max_np``: Horovod's older
        names of ``min_num_proc``/``max_num_proc``)."""
        rank_env = _with_nics(check_rank_env(env, caller), _nics(nics))
        num_proc = check_num_proc(num_proc, caller, none_means="the session's default parallelism")
        options = cls(caller=caller, num_proc=num_proc,
                      min_num_proc=min_np if min_num_proc is None else min_num_proc,
                      max_num_proc=max_np if max_num_proc is None else max_num_proc,
                      reset_limit=check_reset_limit(reset_limit, caller), start_timeout=_start_timeout(start_timeout),
                      elastic_timeout=float(config.ELASTIC_TIMEOUT.get() if elastic_timeout is None
                                            else elastic_timeout),
                      rank_env=rank_env, executable=_executable(executable),
                      output=OutputOptions(stdout, stderr, verbose, prefix_output_with_timestamp))
        return options if num_proc is None else options.with_default_num_proc(num_proc)

    def with_default_num_proc(self, default: int) -> "ElasticSparkOptions":
        """These options with ``num_proc`` set (``default`` unless it was given) and the elastic
        sizes resolved against it and checked."""
        num_proc = self.num_proc if self.num_proc is not None else check_num_proc(default, self.caller)
        low, high = elastic_sizes(num_proc, self.min_num_proc, self.max_num_proc, self.caller)
        return dataclasses.replace(self, num_proc=num_proc, min_num_proc=low, max_num_proc=high)
