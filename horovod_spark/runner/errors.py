"""Errors the launchers raise on the driver side."""
from typing import Optional


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
