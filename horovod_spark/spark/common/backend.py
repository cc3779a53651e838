"""How an estimator runs its ranks: Horovod's ``Backend`` interface and ``SparkBackend``
(``horovod.spark.common.backend``), so ``TorchEstimator(backend=SparkBackend(num_proc=4), ...)`` ports as is.

``SparkBackend`` runs the ranks with ``horovod_spark.run`` and carries its settings: the number of
ranks, environment variables for them, and any other ``horovod_spark.run`` argument
(``start_timeout``, ``verbose``, ``use_mpi``, ``nics``, ...). A custom backend (any object with
``run(fn, args, kwargs, env)`` returning the results by rank, and ``num_processes()``) runs the
ranks somewhere else; the estimator then leaves the Spark cluster checks to it.
"""
import inspect
import numbers
from typing import Any, Callable, Dict, List, Optional

# horovod_spark.run's own arguments, which a backend decides per call.
_PER_CALL = ("fn", "args", "kwargs", "num_proc", "env")


class Backend:
    """The interface an estimator runs its training function through."""

    def run(self, fn: Callable, args=(), kwargs: Optional[dict] = None, env: Optional[Dict[str, str]] = None) -> List:
        """Run ``fn(*args, **kwargs)`` on every rank with ``env`` added to the ranks' environment;
        return the results as a list ordered by rank."""
        raise NotImplementedError

    def num_processes(self) -> int:
        """How many ranks ``run`` starts."""
        raise NotImplementedError


def default_num_proc() -> int:
    """The active session's default parallelism (a classic SparkContext's, or what a Spark Connect
    session's configuration tells): the number of ranks when none is given."""
    from horovod_spark.spark.session_cluster import active_session, default_parallelism
    return default_parallelism(active_session())


def _run_parameters() -> List[str]:
    from horovod_spark.spark.driver import run
    return [name for name in inspect.signature(run).parameters if name not in _PER_CALL]


class SparkBackend(Backend):
    """Runs the ranks as one Spark barrier stage with ``horovod_spark.run``.

    ``num_proc``: number of ranks (default: the active SparkContext's default parallelism, read
    when the backend is first used). ``env``: environment variables added to every rank's (the
    executors' own environment is the base; Horovod's SparkBackend copied the driver's instead).
    ``**kwargs``: other ``horovod_spark.run`` arguments, used for every run.
    """

    def __init__(self, num_proc: Optional[int] = None, env: Optional[Dict[str, str]] = None, **kwargs):
        if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, numbers.Integral)
                                     or num_proc < 1):
            raise ValueError("SparkBackend(num_proc=%r): pass a positive number of ranks, or None for Spark's "
                             "default parallelism" % (num_proc,))
        if env is not None and not isinstance(env, dict):
            raise TypeError("SparkBackend(env=...) takes a dict of environment variables for the ranks, got %s"
                            % type(env).__name__)
        accepted = _run_parameters()
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise TypeError("SparkBackend does not take %s: its keyword arguments go to horovod_spark.run, which "
                            "takes %s" % (", ".join("%s=" % k for k in unknown), ", ".join(accepted)))
        self._num_proc = None if num_proc is None else int(num_proc)
        self._env = dict(env or {})
        self._kwargs = dict(kwargs)

    @property
    def env(self) -> Dict[str, str]:
        return dict(self._env)

    @property
    def run_options(self) -> Dict[str, Any]:
        """The ``horovod_spark.run`` arguments this backend passes on every run."""
        return dict(self._kwargs)

    def num_processes(self) -> int:
        if self._num_proc is None:
            self._num_proc = default_num_proc()
        return self._num_proc

    def run(self, fn: Callable, args=(), kwargs: Optional[dict] = None, env: Optional[Dict[str, str]] = None,
            **run_options) -> List:
        """``horovod_spark.run(fn, args, kwargs, num_proc=num_processes(), env=<backend env + env>, ...)``;
        ``run_options`` add to (and override) the backend's own ``horovod_spark.run`` arguments."""
        from horovod_spark.spark.driver import run
        full_env = dict(self._env)
        full_env.update(env or {})
        options = dict(self._kwargs)
        options.update(run_options)
        return run(fn, args=args, kwargs=kwargs, num_proc=self.num_processes(), env=full_env, **options)

    def __repr__(self):
        return "SparkBackend(num_proc=%r%s)" % (self._num_proc, "".join(
            ", %s=%r" % (k, v) for k, v in sorted(dict(self._kwargs, **({"env": self._env} if self._env else {}))
                                                  .items())))
