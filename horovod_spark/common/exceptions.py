"""Errors raised by collectives, with Horovod's names so ported `except` clauses keep working."""


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
