"""Elastic fits, the driver's side: the ``elastic`` / ``min_num_proc`` / ``max_num_proc`` Params
checked into ``ElasticSettings``, and the ranks run through ``horovod_spark.run_elastic`` instead
of ``horovod_spark.run``.

Off by default: an elastic fit that lost a rank goes on with fewer ranks, so its global batch
(and the model it returns) depends on when executors were lost, while a fixed-size fit is
reproducible from its seed and, when an executor dies, fails within seconds and resumes from its
last epoch checkpoint when fitted again with the same ``run_id``.
"""
import dataclasses
import numbers
from dataclasses import dataclass
from typing import Optional

from horovod_spark.exceptions import ElasticJobError
from horovod_spark.launcher.options import check_elastic_sizes


@dataclass
class ElasticSettings:
    min_num_proc: Optional[int]   # None: 1 (any survivor finishes the fit)
    max_num_proc: Optional[int]   # None: num_proc


def check_elastic(est) -> Optional[ElasticSettings]:
    """The elastic settings of ``est``'s Params, or None for a fixed-size fit."""
    get = est.getOrDefault
    elastic, low, high = get("elastic"), get("min_num_proc"), get("max_num_proc")
    if not isinstance(elastic, bool):
        raise ValueError("elastic must be True or False, got %r" % (elastic,))
    for name, value in (("min_num_proc", low), ("max_num_proc", high)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
            raise ValueError("%s must be a positive integer or None, got %r" % (name, value))
        if value is not None and not elastic:
            raise ValueError("%s=%r applies to elastic fits only: pass elastic=True as well, or drop %s"
                             % (name, value, name))
    if not elastic:
        return None
    if low is not None and high is not None and low > high:
        raise ValueError("min_num_proc=%d is more than max_num_proc=%d: need min_num_proc <= num_proc <= "
                         "max_num_proc" % (low, high))
    if get("backend") is not None:
        raise ValueError("elastic=True runs the ranks with horovod_spark.run_elastic, which a backend cannot "
                         "replace: drop backend= (pass num_proc= instead) or elastic=True")
    return ElasticSettings(None if low is None else int(low), None if high is None else int(high))


def resolve_sizes(settings: ElasticSettings, num_proc: int):
    """(min_num_proc, max_num_proc) for a fit of ``num_proc`` ranks, or a ValueError naming the misfit."""
    low = 1 if settings.min_num_proc is None else settings.min_num_proc
    high = num_proc if settings.max_num_proc is None else settings.max_num_proc
    check_elastic_sizes(num_proc, low, high, "elastic fit")
    return low, high


def run_elastic_fit(fn, spec, settings: ElasticSettings, num_proc: int, env, printer, verbose: int, run_id: str):
    """Rank 0's result of ``fn(spec)`` run as an elastic job on Spark, its progress lines written to
    ``printer``; an ElasticJobError that says what was lost and what the fit's Params allow when
    the job cannot go on."""
    from horovod_spark.spark.elastic.run import run_elastic_with_options

    from .elastic_progress import ProgressService
    from .run_ranks import elastic_options
    low, high = resolve_sizes(settings, num_proc)
    try:
        with ProgressService(printer) as progress:
            spec = dataclasses.replace(spec, progress=progress.channel)
            results = run_elastic_with_options(fn, (spec,), None, elastic_options(num_proc, low, high, env, verbose))
    except ElasticJobError as exc:
        raise ElasticJobError("the elastic fit of run %s (num_proc=%d, min_num_proc=%d) stopped: %s. Its last "
                              "completed epoch is checkpointed: fit again with run_id=%r to resume from it, with a "
                              "lower min_num_proc or once the cluster has room for more ranks"
                              % (run_id, num_proc, low, exc, run_id)) from exc
    # Only rank 0 returns the model; the ranks that finished are listed by rank.
    return results[:1]
