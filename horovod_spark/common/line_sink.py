"""A text sink that hands whole lines to a subclass: the shape of every driver-side filter of rank output.

The runners write rank output in arbitrary pieces from their service threads; a subclass sees one
complete line at a time (``_line``), under a lock, and never raises into the runner.
"""
import threading


class LineSink:
    def __init__(self):
        self._pending = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                self._line(line)
        return len(text)

    def close(self) -> None:
        """Pass on a last line that never got its newline, then ``_closed``."""
        with self._lock:
            if self._pending:
                self._line(self._pending)
                self._pending = ""
            self._closed()

    def _line(self, line: str) -> None:
        raise NotImplementedError

    def _closed(self) -> None:
        """Called once by ``close`` under the lock, after the last line."""


def flush_quietly(sink) -> None:
    """Flush ``sink`` if it can be flushed; a closed or broken sink must not fail a runner's thread."""
    flush = getattr(sink, "flush", None)
    if flush is not None:
        try:
            flush()
        except (OSError, ValueError):
            pass
