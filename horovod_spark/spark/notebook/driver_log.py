"""Which rank output reaches a HorovodRunner's notebook cell: ``log_to_driver`` and the driver's line filter.

A rank marks a line for the driver by printing it after ``MARKER`` on its stdout, so the mark
travels the way every rank line does (through Spark's driver service, or the local launcher's
pipes) and needs no channel of its own. On the driver, ``RankOutputFilter`` sits where the runner
writes the ranks' prefixed lines (``[rank]<stream>:text``): it strips the mark and, with
``driver_log_verbosity="log_callback_only"``, sends every unmarked rank line to the driver
process's own stderr (the driver log on Databricks, the kernel's console under Jupyter) instead
of the cell. Neither side imports pyspark: ranks import this module.
"""
import re
import sys

from horovod_spark.common.line_sink import LineSink, flush_quietly

MARKER = "[horovod_spark.log_to_driver] "
VERBOSITIES = ("all", "log_callback_only")

# A rank line as horovod_spark.run and the local launcher print it, optionally after a timestamp.
_RANK_LINE = re.compile(r"^(?P<prefix>(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} )?\[\d+\]<(?:stdout|stderr)>:)"
                        r"(?P<text>.*)$", re.DOTALL)


def log_to_driver(message) -> None:
    """Show ``message`` in the driver's notebook cell under ``HorovodRunner`` whatever its
    ``driver_log_verbosity`` (sparkdl's ``sparkdl.horovod.log_to_driver``). Call it on any rank;
    outside a HorovodRunner job it prints the message, marked, to stdout."""
    lines = str(message).split("\n")
    sys.stdout.write("".join(MARKER + line + "\n" for line in lines))
    sys.stdout.flush()


def check_verbosity(value) -> str:
    if value not in VERBOSITIES:
        raise ValueError("driver_log_verbosity=%r: pass 'all' (every rank's output in the cell) or "
                         "'log_callback_only' (only log_to_driver / LogCallback messages; the rest goes to "
                         "the driver's own stderr)" % (value,))
    return value


class RankOutputFilter(LineSink):
    """A text sink for the runner (``write``/``flush``) that passes rank lines to ``cell`` or
    ``driver_log`` by ``verbosity``; lines that are not rank lines (the runner's own messages)
    always go to ``cell``."""

    def __init__(self, verbosity: str, cell=None, driver_log=None):
        super().__init__()
        self.verbosity = check_verbosity(verbosity)
        self._cell = cell if cell is not None else sys.stdout
        self._driver_log = driver_log if driver_log is not None else (sys.__stderr__ or sys.stderr)

    def flush(self) -> None:
        for sink in (self._cell, self._driver_log):
            flush_quietly(sink)

    def _closed(self) -> None:
        self.flush()

    def _line(self, line: str) -> None:
        match = _RANK_LINE.match(line)
        if match is None:
            self._write(self._cell, line)
            return
        text = match.group("text")
        if text.startswith(MARKER):
            self._write(self._cell, match.group("prefix") + text[len(MARKER):])
        elif self.verbosity == "all":
            self._write(self._cell, line)
        else:
            self._write(self._driver_log, line)

    @staticmethod
    def _write(sink, line: str) -> None:
        try:
            sink.write(line + "\n")
        except (OSError, ValueError):
            pass
