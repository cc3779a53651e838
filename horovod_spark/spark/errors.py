"""Exceptions raised on the driver by ``horovod_spark.run``."""
from horovod_spark.runner import errors as runner_errors


class HorovodSparkError(RuntimeError):
    """run() could not start, or the job did not complete."""


class RankFailedError(HorovodSparkError, runner_errors.RankFailedError):
    """fn raised (or its process died) on a rank; catching the launcher's ``RankFailedError``
    catches this too.

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
