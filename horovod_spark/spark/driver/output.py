"""Prints the ranks' streamed stdout/stderr on the driver, one prefixed line at a time.

Chunks arrive as raw bytes cut wherever the task's read happened to end, so each (rank, stream)
keeps its unfinished last line until the newline (or the end of the run) arrives; otherwise two
ranks' half-lines would interleave into one. A line longer than ``line_sink.MAX_LINE_BYTES`` is
printed in marked pieces (``line_sink.LineAssembler``), so a rank that writes megabytes without a
newline costs the driver neither memory nor quadratic time. The prefix follows horovodrun's
``[rank]<stream>:`` so log tooling written for Horovod keeps working.

The core's stall warnings (a collective some ranks have not joined: which ranks, which tensor)
also go to the driver's log, the ``horovod_spark.spark.stall`` logger, so they are on record where
the driver's logging is collected even when the ranks' output is shown elsewhere or not kept.
"""
import logging
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

from horovod_spark.common.console import line_start
from horovod_spark.common.line_sink import LineAssembler, marked

# The core prints this at the start of each stall warning (native/engine/coordinator.cc).
STALL_MARK = "[horovod_spark] WARNING: stall:"
stall_log = logging.getLogger("horovod_spark.spark.stall")
# Only to handlers the application configured (Spark's driver log, the user's): without one, the
# line is already on the console as the rank's stderr and must not be printed twice.
stall_log.addHandler(logging.NullHandler())


def _format_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + ".%03d " % int((t % 1) * 1000)


class OutputSink:
    def __init__(self, stdout=None, stderr=None, timestamps: bool = False):
        # Resolved now, not at import, so pytest's capsys and notebook redirections are honoured.
        self._files = {"stdout": stdout if stdout is not None else sys.stdout,
                       "stderr": stderr if stderr is not None else sys.stderr}
        self._timestamps = timestamps
        # (rank, stream) -> [when its pending line began, its assembler]
        self._partial: Dict[Tuple[int, str], list] = {}
        self._lock = threading.Lock()

    def __call__(self, rank: int, chunks: List[Tuple[str, float, bytes]]) -> None:
        with self._lock:
            touched = set()
            for stream, t, data in chunks:
                entry = self._partial.get((rank, stream))
                if entry is None:
                    entry = self._partial[(rank, stream)] = [t, LineAssembler()]
                if not entry[1].pending:
                    entry[0] = t
                for line, complete in entry[1].feed(data):
                    self._write(rank, stream, entry[0], line, complete)
                    entry[0] = t
                touched.add(stream)
            for stream in touched:
                self._flush(stream)

    def close(self) -> None:
        """Print whatever unterminated last lines are left (a rank that died mid-line)."""
        with self._lock:
            for (rank, stream), (t, lines) in sorted(self._partial.items()):
                rest = lines.rest()
                if rest:
                    self._write(rank, stream, t, rest)
            self._partial.clear()
            for stream in self._files:
                self._flush(stream)

    def runner_message(self, text: str, stream: str = "stderr") -> None:
        with self._lock:
            out = self._files[stream]
            out.write("%s[horovod_spark] %s\n" % (line_start(out), text))
            self._flush(stream)

    def _write(self, rank: int, stream: str, t: float, line: bytes, complete: bool = True) -> None:
        text = marked(line.decode("utf-8", errors="replace").rstrip("\r"), complete)
        if stream == "stderr" and text.startswith(STALL_MARK):
            stall_log.warning("rank %d: %s", rank, text[len("[horovod_spark] "):])
        prefix = _format_time(t) if self._timestamps else ""
        out = self._files[stream]
        # On a terminal, a pending Spark progress bar is wiped first (common/console.py).
        out.write("%s%s[%d]<%s>:%s\n" % (line_start(out), prefix, rank, stream, text))

    def _flush(self, stream: str) -> None:
        flush: Optional[callable] = getattr(self._files[stream], "flush", None)
        if flush is not None:
            try:
                flush()
            except (OSError, ValueError):
                pass  # a closed or unflushable sink must not kill the service thread
