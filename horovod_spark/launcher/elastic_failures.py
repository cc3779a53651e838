"""What an elastic job lost on its way, so that the error that finally ends it names every loss.

A worker whose function raised is lost like one whose process died (as in Horovod's elastic
drivers): the survivors roll back and go on. Only when the job cannot go on (fewer ranks than
``min_num_proc``, ``reset_limit`` reached, every rank lost) does it fail, and then the error lists
each loss, with what each failed function raised and the first such traceback in full.
"""
from typing import List, Optional

# Enough of an exception's last line to recognise it; the first traceback is shown whole.
_EXCEPTION_LINE_CHARS = 300


def exception_line(traceback_text: str) -> str:
    """The last line of a formatted traceback: the exception's type and message."""
    lines = [line.strip() for line in traceback_text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else "an exception"
    return line if len(line) <= _EXCEPTION_LINE_CHARS else line[:_EXCEPTION_LINE_CHARS] + "..."


class Failures:
    """The losses of one elastic job, in the order they happened."""

    def __init__(self):
        self.lost: List[str] = []
        self._first_traceback: Optional[str] = None

    def add(self, worker: int, rank: Optional[int], how: str, traceback_text: Optional[str] = None) -> str:
        """Record that ``worker`` (last ``rank``) was lost: it ``how`` (e.g. "exited with code 1"),
        or, given the traceback of its function, raised; returns the entry."""
        who = "worker %d (rank %s)" % (worker, rank)
        if traceback_text:
            how = "raised %s" % exception_line(traceback_text)
            if self._first_traceback is None:
                self._first_traceback = "%s:\n%s" % (who, traceback_text.rstrip())
        self.lost.append("%s %s" % (who, how))
        return self.lost[-1]

    def summary(self) -> str:
        return "; ".join(self.lost) or "none"

    def traceback_note(self) -> str:
        """The first traceback of a function that raised, to append to the final error ('' if none)."""
        if self._first_traceback is None:
            return ""
        return "\nThe first function that raised, on %s" % self._first_traceback
