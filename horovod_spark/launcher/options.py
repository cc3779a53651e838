"""The options of a job's ranks, checked before anything starts.

Each option has one check with one wording, shared by every entry point: ``run_local``,
``run_elastic_local`` and the command line build their options here, and the Spark runner's options
(``horovod_spark.spark.run_options``) reuse the same checks. A message names the call that got the
value (``run_local(num_proc=0): ...``), so the user sees which of their calls to fix.
"""
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, TextIO

from horovod_spark.common import config


def check_rank_count(name: str, value, caller: str, none_means: Optional[str] = None) -> Optional[int]:
    """``value`` as an int >= 1 (``None`` passes when ``none_means`` says what it stands for).
    A value that is no integer raises TypeError, one below 1 ValueError, both in one wording."""
    if value is None and none_means is not None:
        return None
    message = "%s(%s=%r): pass a positive number of ranks (%s must be a positive integer%s)" % (
        caller, name, value, name, ", or None for %s" % none_means if none_means is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(message)
    if value < 1:
        raise ValueError(message)
    return int(value)


def check_num_proc(value, caller: str, none_means: Optional[str] = None) -> Optional[int]:
    """The number of ranks of a job started by ``caller`` (see ``check_rank_count``)."""
    return check_rank_count("num_proc", value, caller, none_means)


def check_elastic_sizes(num_proc: int, min_num_proc: int, max_num_proc: int, caller: str) -> None:
    """An elastic job starts ``num_proc`` ranks and may shrink to ``min_num_proc`` or grow to
    ``max_num_proc`` (each already a positive count)."""
    if not min_num_proc <= num_proc <= max_num_proc:
        raise ValueError("%s: need min_num_proc <= num_proc <= max_num_proc, got %d <= %d <= %d; change num_proc, "
                         "min_num_proc or max_num_proc" % (caller, min_num_proc, num_proc, max_num_proc))


def check_reset_limit(value, caller: str) -> Optional[int]:
    """How many resets an elastic job may take; None is unlimited."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0):
        raise ValueError("%s(reset_limit=%r): reset_limit must be a whole number or None (unlimited)"
                         % (caller, value))
    return None if value is None else int(value)


def check_rank_env(env, caller: Optional[str] = None) -> Dict[str, str]:
    """The environment variables a job adds to its ranks': a mapping of names to values (each
    value becomes its ``str``); a variable of ours with a bad value raises ``ConfigError``."""
    if env is None:
        return {}
    what = "%s(env=...)" % caller if caller else "env"
    if not isinstance(env, Mapping):
        raise TypeError("%s takes a dict of environment variables for the ranks, got %s" % (what, type(env).__name__))
    out = {}
    for name, value in env.items():
        if not isinstance(name, str) or value is None:
            raise TypeError("%s: entries must be str -> str (got %r: %r)" % (what, name, value))
        out[name] = str(value)
    config.check_assignments(out, "env")
    return out


def elastic_sizes(num_proc: int, min_num_proc, max_num_proc, caller: str):
    """(min_num_proc, max_num_proc) of an elastic job of ``num_proc`` ranks, each defaulting to
    ``num_proc`` when None, checked."""
    low = check_rank_count("min_num_proc", num_proc if min_num_proc is None else min_num_proc, caller)
    high = check_rank_count("max_num_proc", num_proc if max_num_proc is None else max_num_proc, caller)
    check_elastic_sizes(num_proc, low, high, caller)
    return low, high


@dataclass(frozen=True)
class LocalRunOptions:
    """What ``run_local`` and the command line run: ``num_proc`` ranks with ``env`` added to ours,
    their output to ``stdout``/``stderr`` (prefixed by rank unless ``prefix_output`` is False),
    the whole run bounded by ``timeout`` seconds (None: unlimited)."""
    num_proc: int
    env: Dict[str, str] = field(default_factory=dict)
    timeout: Optional[float] = None
    stdout: Optional[TextIO] = None
    stderr: Optional[TextIO] = None
    prefix_output: bool = True

    @classmethod
    def from_kwargs(cls, caller: str, num_proc=2, env=None, timeout=None, stdout=None, stderr=None,
                    prefix_output: bool = True) -> "LocalRunOptions":
        return cls(num_proc=check_num_proc(num_proc, caller), env=check_rank_env(env, caller), timeout=timeout,
                   stdout=stdout, stderr=stderr, prefix_output=prefix_output)


@dataclass(frozen=True)
class ElasticLocalOptions:
    """What ``run_elastic_local`` runs: ``num_proc`` local ranks that may shrink to ``min_num_proc``
    and grow to ``max_num_proc`` (as ``discover_slots()`` offers), within ``reset_limit`` resets
    (None: unlimited), each reset waiting at most ``elastic_timeout`` seconds for enough ranks."""
    num_proc: int
    min_num_proc: int
    max_num_proc: int
    reset_limit: Optional[int]
    elastic_timeout: float
    discover_slots: Optional[Callable[[], int]] = None
    env: Dict[str, str] = field(default_factory=dict)
    timeout: Optional[float] = None
    stdout: Optional[TextIO] = None
    stderr: Optional[TextIO] = None
    prefix_output: bool = True

    @classmethod
    def from_kwargs(cls, caller: str, num_proc=2, min_num_proc=None, max_num_proc=None, reset_limit=None,
                    elastic_timeout=None, discover_slots=None, env=None, timeout=None, stdout=None, stderr=None,
                    prefix_output: bool = True) -> "ElasticLocalOptions":
        num_proc = check_num_proc(num_proc, caller)
        low, high = elastic_sizes(num_proc, min_num_proc, max_num_proc, caller)
        reset_limit = check_reset_limit(reset_limit, caller)
        if elastic_timeout is None:
            elastic_timeout = config.ELASTIC_TIMEOUT.get()
        return cls(num_proc=num_proc, min_num_proc=low, max_num_proc=high, reset_limit=reset_limit,
                   elastic_timeout=float(elastic_timeout), discover_slots=discover_slots,
                   env=check_rank_env(env, caller), timeout=timeout, stdout=stdout, stderr=stderr,
                   prefix_output=prefix_output)

    def io(self) -> Dict[str, Any]:
        """The supervisors' output arguments."""
        return dict(stdout=self.stdout, stderr=self.stderr, prefix_output=self.prefix_output)
