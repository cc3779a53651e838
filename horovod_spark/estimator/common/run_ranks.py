"""How a fit runs its ranks: ``horovod_spark.run`` with ``num_proc``, or the ``backend`` Param (Horovod's
meaning: an object that decides the number of ranks and runs them).

Our ``SparkBackend`` still gets the driver's progress printer and the Spark cluster checks; any
other backend runs the ranks its own way and prints their output as it likes.
"""
import numbers
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from horovod_spark.spark.backend import SparkBackend
from horovod_spark.spark.run_options import ElasticSparkOptions, SparkRunOptions

from . import slot_gate

# How the fit names itself in the messages of the options it passes on.
FIT = "fit"


@dataclass
class RankRunner:
    backend: Any                 # None: horovod_spark.run
    num_proc: Optional[int]      # None: Spark's default parallelism (no backend, no num_proc)

    @property
    def on_spark(self) -> bool:
        """True when the ranks run through horovod_spark.run (so the cluster checks apply)."""
        return self.backend is None or isinstance(self.backend, SparkBackend)

    @property
    def out(self):
        """Where the driver prints progress: the SparkBackend's ``stdout`` if it has one."""
        if isinstance(self.backend, SparkBackend):
            return self.backend.run_options.get("stdout")
        return None

    def rank_env(self, defaults: Dict[str, str], user: Dict[str, str]) -> Dict[str, str]:
        """What the ranks' environment gets from the estimator: the framework's ``defaults`` unless the
        SparkBackend's own env sets them, then the user's Params (``backend_env``), which win."""
        env = dict(defaults)
        if isinstance(self.backend, SparkBackend):
            for name in self.backend.env:
                env.pop(name, None)
        env.update(user)
        return env

    def run(self, fn, args, num_proc: int, env: Dict[str, str], printer, verbose: int) -> List:
        """Results by rank of ``fn(*args)``; ``num_proc`` is the fit's resolved number of ranks."""
        if self.on_spark:
            from horovod_spark.session import active_session
            from horovod_spark.spark.entry import run_with_options

            def log(text):
                if verbose >= 1:
                    printer.write("[horovod_spark] %s\n" % text)
                    printer.flush()

            key, total = slot_gate.cluster_slots(active_session(), num_proc)
            with slot_gate.slots_held(key, total, num_proc, log):
                return run_with_options(fn, args, None, self.spark_options(num_proc, env, printer, verbose))
        return self.backend.run(fn, args=args, kwargs={}, env=env)

    def spark_options(self, num_proc: int, env: Dict[str, str], printer, verbose: int) -> SparkRunOptions:
        """The options of a fit's ``horovod_spark.run``: the SparkBackend's own settings win, except
        stdout: the progress printer writes to it in turn."""
        if isinstance(self.backend, SparkBackend):
            options = {"stdout": printer}
            if "verbose" not in self.backend.run_options:
                options["verbose"] = verbose
            return self.backend.run_options_for(env, **options)
        return SparkRunOptions.from_kwargs(FIT, num_proc=num_proc, stdout=printer, verbose=verbose, env=env)


def elastic_options(num_proc: int, min_num_proc: int, max_num_proc: int, env: Dict[str, str],
                    verbose: int) -> ElasticSparkOptions:
    """The options of an elastic fit's ``horovod_spark.run_elastic``."""
    return ElasticSparkOptions.from_kwargs(FIT, num_proc=num_proc, min_num_proc=min_num_proc,
                                           max_num_proc=max_num_proc, env=env, verbose=verbose)


def choose(backend, num_proc: Optional[int]) -> RankRunner:
    """The RankRunner for the ``backend`` and ``num_proc`` Params (num_proc already checked)."""
    if backend is None:
        return RankRunner(None, num_proc)
    if not (callable(getattr(backend, "run", None)) and callable(getattr(backend, "num_processes", None))):
        raise ValueError("backend=%r is not a backend: pass horovod_spark.spark.common.backend.SparkBackend("
                         "num_proc=...) or an object with run(fn, args, kwargs, env) and num_processes()"
                         % (backend,))
    count = backend.num_processes()
    if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
        raise ValueError("backend.num_processes() returned %r; a backend must run a positive number of ranks"
                         % (count,))
    if num_proc is not None and num_proc != count:
        raise ValueError("num_proc=%d and backend=%r (which runs %d ranks) disagree: pass only the backend, or "
                         "give both the same number of ranks" % (num_proc, backend, count))
    return RankRunner(backend, int(count))
