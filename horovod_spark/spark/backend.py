"""How an estimator runs its ranks: Horovod's ``Backend`` interface and ``SparkBackend``
(``horovod.spark.common.backend``), so ``TorchEstimator(backend=SparkBackend(num_proc=4), ...)`` ports as is.

``SparkBackend`` runs the ranks with ``horovod_spark.run`` and carries its settings: the number of
ranks, environment variables for them, and any other ``horovod_spark.run`` argument
(``start_timeout``, ``verbose``, ``use_mpi``, ``nics``, ...). A custom backend (any object with
``run(fn, args, kwargs, env)`` returning the results by rank, and ``num_processes()``) runs the
ranks somewhere else; the estimator then leaves the Spark cluster checks to it.
"""
import inspect
from typing import Any, Callable, Dict, List, Optional

from horovod_spark.launcher.options import check_num_proc, check_rank_env

from .run_options import SparkRunOptions

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
    from horovod_spark import session
    return session.default_parallelism(session.active_session())


def _run_parameters() -> List[str]:
    from .entry import run
    return [name for name in inspect.signature(run).parameters if name not in _PER_CALL]


class SparkBackend(Backend):
    """Runs the ranks as one Spark barrier stage with ``horovod_spark.run``.

    ``num_proc``: number of ranks (default: the active SparkContext's default parallelism, read
    when the backend is first used). ``env``: environment variables added to every rank's (the
    executors' own environment is the base; Horovod's SparkBackend copied the driver's instead).
    ``**kwargs``: other ``horovod_spark.run`` arguments, used for every run.
    """

    def __init__(self, num_proc: Optional[int] = None, env: Optional[Dict[str, str]] = None, **kwargs):
        self._num_proc = check_num_proc(num_proc, "SparkBackend", none_means="Spark's default parallelism")
        self._env = check_rank_env(env, "SparkBackend")
        accepted = _run_parameters()
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise TypeError("SparkBackend does not take %s: its keyword arguments go to horovod_spark.run, which "
                            "takes %s" % (", ".join("%s=" % k for k in unknown), ", ".join(accepted)))
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
        from .entry import run_with_options
        return run_with_options(fn, args, kwargs, self.run_options_for(env, **run_options))

    def run_options_for(self, env: Optional[Dict[str, str]] = None, **run_options) -> SparkRunOptions:
        """The checked options of one run: ``num_processes()`` ranks, the backend's env plus ``env``,
        and the backend's ``horovod_spark.run`` arguments updated by ``run_options``."""
        full_env = dict(self._env)
        full_env.update(env or {})
        options = dict(self._kwargs)
        options.update(run_options)
        return SparkRunOptions.from_kwargs("SparkBackend", num_proc=self.num_processes(), env=full_env, **options)

    def __repr__(self):
        return "SparkBackend(num_proc=%r%s)" % (self._num_proc, "".join(
            ", %s=%r" % (k, v) for k, v in sorted(dict(self._kwargs, **({"env": self._env} if self._env else {}))
                                                  .items())))
