"""Every exception horovod_spark raises for its users to catch: ``from horovod_spark.exceptions import ...``.

The classes depend on nothing, so each layer, the core bindings at the bottom included, raises
them from here. Older import paths name the same classes: ``horovod_spark.common.exceptions``
(Horovod's collectives errors), ``horovod_spark.spark`` (``HorovodSparkError``,
``RankFailedError``, ``StartTimeoutError``), ``horovod_spark.runner.errors.RankFailedError``, and
the framework modules (``horovod_spark.torch.HorovodInternalError``, ...).

What each is a subclass of matters to ported code: Horovod raises its collective errors as
RuntimeErrors, and a Spark run's failed rank is caught both as a ``HorovodSparkError`` and as the
local launcher's ``RankFailedError``.
"""
from typing import Optional

# -- collectives (raised on the ranks; Horovod's names) --------------------------------------------

class HorovodInternalError(RuntimeError):
    """The job cannot continue: a peer exited or lost its connection, or horovod_spark shut down.

    Like Horovod's, this is the error an elastic or retrying driver catches to restart the job.
    """


class HorovodCollectiveError(ValueError, RuntimeError):
    """One collective was wrong (mismatched shapes, dtypes or ops across ranks, a bad root or splits);
    the message names the tensor and the ranks. Other collectives keep working.

    A RuntimeError too: Horovod raises these as RuntimeErrors, and ported ``except RuntimeError``
    clauses must keep catching them."""


class HorovodTimeoutError(HorovodInternalError, TimeoutError):
    """A wait on a collective ran past its timeout."""


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic training: ranks joined or left the job; every rank raises it at the same commit so
    ``hvd.elastic.run`` re-forms the job without rolling back. ``skip_sync``: True when ranks only
    left, so the survivors' state is already in agreement and need not be broadcast again."""

    def __init__(self, skip_sync: bool = False):
        super().__init__("the job's membership changed")
        self.skip_sync = skip_sync


# -- configuration and rendezvous ----------------------------------------------------------------

class ConfigError(ValueError):
    """A HOROVOD_* environment variable holds a value horovod_spark cannot use (or one it needs is
    missing); the message names the variable, the value and what it accepts. The native core
    raises this class too, for the variables it reads."""


class TransportError(RuntimeError):
    """The native core could not set up or keep its links to the other ranks: a shared-memory
    segment or socket could not be made, or a peer could not be reached in time. The core raises
    this class itself (its module takes it from here at import)."""


class KVError(RuntimeError):
    """The job's key-value service refused or failed a request (not a timeout)."""


# -- launchers (raised on the driver) ------------------------------------------------------------

class RankFailedError(RuntimeError):
    """A rank failed (its function raised, or its process exited abnormally); the job was stopped.

    ``rank`` and ``exit_code`` identify the failure; ``remote_traceback`` is the rank's formatted
    traceback, or the tail of its stderr when it died without one.
    """

    def __init__(self, rank: int, exit_code: Optional[int], remote_traceback: str, summary: str = ""):
        self.rank = rank
        self.exit_code = exit_code
        self.remote_traceback = remote_traceback
        self.summary = summary or "rank %d failed" % rank
        text = self.summary
        if remote_traceback:
            text += "\n--- rank %d traceback ---\n%s" % (rank, remote_traceback.rstrip("\n"))
        super().__init__(text)

    def __reduce__(self):
        # Default exception pickling would call __init__ with the message only.
        return (type(self), (self.rank, self.exit_code, self.remote_traceback, self.summary))


class ElasticJobError(RuntimeError):
    """An elastic job could not go on: fewer ranks than ``min_num_proc`` remained within
    ``elastic_timeout``, or more resets than ``reset_limit`` were needed. The message names the
    ranks lost and why."""


class HorovodSparkError(RuntimeError):
    """``horovod_spark.run`` could not start, or the job did not complete."""


class SparkRankFailedError(HorovodSparkError, RankFailedError):
    """fn raised (or its process died) on a rank of ``horovod_spark.run``; ``horovod_spark.spark``
    names it ``RankFailedError``, and catching the local launcher's ``RankFailedError`` catches it.

    ``rank``: the first rank that failed; ``exc_type``: the remote exception's class name (or
    ``"ProcessExit"``); ``remote_traceback``: its formatted traceback as text; ``job_group``: the
    Spark job group that was cancelled; ``other_failures``: ``{rank: exc_type}`` of ranks that
    failed after it (usually peers losing the failed rank).
    """

    def __init__(self, rank, exc_type, message, remote_traceback, job_group, host="", other_failures=None):
        self.rank = rank
        self.exit_code = None
        self.exc_type = exc_type
        self.remote_message = message
        self.remote_traceback = remote_traceback
        self.job_group = job_group
        self.host = host
        self.other_failures = dict(other_failures or {})
        self.summary = "rank %d%s failed: %s: %s" % (rank, " on %s" % host if host else "", exc_type, message)
        text = self.summary
        if self.other_failures:
            others = sorted(self.other_failures)
            text += " (then also rank%s %s)" % ("s" if len(others) > 1 else "", ", ".join(str(r) for r in others))
        if remote_traceback:
            text += "\n--- rank %d traceback ---\n%s" % (rank, remote_traceback.rstrip())
        RuntimeError.__init__(self, text)

    def __reduce__(self):
        return (type(self), (self.rank, self.exc_type, self.remote_message, self.remote_traceback,
                             self.job_group, self.host, self.other_failures))


class StartTimeoutError(HorovodSparkError, TimeoutError):
    """Not every task registered within start_timeout; ``missing`` lists their partitions (= ranks)."""

    def __init__(self, message, missing, job_group):
        self.missing = list(missing)
        self.job_group = job_group
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (str(self), self.missing, self.job_group))


# -- stores and data -----------------------------------------------------------------------------

class StoreConnectionError(ConnectionError):
    """The store's filesystem could not be reached (no client library, unreachable service...)."""


class NonFiniteLossError(FloatingPointError):
    """An estimator's training loss, or its model's weights at an epoch's end, became NaN or infinite
    (``nonfinite_loss='raise'``, the default); the message names the epoch, the step and the rank.
    Raised on the rank: the driver's ``RankFailedError`` carries its name and message."""


class StoreAccessError(OSError):
    """The store's path cannot be written or read back by this process; the first line of the
    message names the path and the cause."""


class PetastormUnavailableError(ImportError):
    """data_module='petastorm' was asked for where Petastorm cannot be imported."""


__all__ = ["HorovodInternalError", "HorovodCollectiveError", "HorovodTimeoutError", "HostsUpdatedInterrupt",
           "ConfigError", "TransportError", "KVError", "RankFailedError", "ElasticJobError", "HorovodSparkError",
           "SparkRankFailedError", "StartTimeoutError", "StoreConnectionError", "PetastormUnavailableError"]
