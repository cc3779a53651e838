"""Rank output cut into lines with a bound on a pending line, and a text sink built on it: what every
launcher's relay of rank output shares.

A rank may write megabytes without a newline. Holding such a line whole until its newline costs
memory in proportion to it, and gluing every arriving chunk onto it costs time in proportion to
its square. So a line longer than ``MAX_LINE_BYTES`` is passed on in pieces of at most that size,
each but the last followed by ``LINE_CONTINUES``; joining a marked piece with the next piece of the
same rank and stream gives the line back.
"""
import threading
from typing import List, Tuple, Union

MAX_LINE_BYTES = 1 << 20
LINE_CONTINUES = " [horovod_spark: line continues]"
# Room for a prefix, a timestamp and a mark: a relay whose pieces pass through another relay cuts
# them this much shorter, and a sink after a relay allows this much more, so no piece is cut twice.
RELAYED_LINE_SLACK = 256

Text = Union[bytes, str]


class LineAssembler:
    """Cuts a stream of bytes (or of str) into lines, in time linear in its length and holding at
    most ``limit`` bytes (characters) of an unfinished line."""

    def __init__(self, limit: int = MAX_LINE_BYTES):
        if limit < 4:
            raise ValueError("limit=%d: a line bound must hold at least 4 bytes (one UTF-8 character)" % limit)
        self._limit = limit
        self._pieces: List[Text] = []
        self._size = 0

    @property
    def pending(self) -> bool:
        """Whether part of a line waits for its newline."""
        return self._size > 0

    def feed(self, data: Text) -> List[Tuple[Text, bool]]:
        """The lines ``data`` completes, without their newlines, as (text, complete) pairs: complete
        is False for a piece of a line longer than the bound, with more of the line to come."""
        out: List[Tuple[Text, bool]] = []
        newline = b"\n" if isinstance(data, bytes) else "\n"
        start = 0
        while True:
            end = data.find(newline, start)
            if end < 0:
                break
            self._add(data[start:end], out)
            out.append((self._take(data[:0]), True))
            start = end + 1
        self._add(data[start:], out)
        return out

    def rest(self, empty: Text = b"") -> Text:
        """The unfinished last line (``empty`` when there is none), which is then forgotten."""
        return self._take(empty)

    def _add(self, segment: Text, out: list) -> None:
        if self._size + len(segment) <= self._limit:
            if segment:
                self._pieces.append(segment)
                self._size += len(segment)
            return
        # Only here is the pending part copied, and at least one full piece leaves with it: each
        # byte is copied a bounded number of times.
        joined = self._take(segment[:0]) + segment
        pos = 0
        while len(joined) - pos > self._limit:
            cut = _cut_point(joined, pos, self._limit)
            out.append((joined[pos:cut], False))
            pos = cut
        self._pieces, self._size = [joined[pos:]], len(joined) - pos

    def _take(self, empty: Text) -> Text:
        line = empty.join(self._pieces) if self._pieces else empty
        self._pieces, self._size = [], 0
        return line


def _cut_point(data: Text, pos: int, limit: int) -> int:
    """Where a piece starting at ``pos`` ends: ``limit`` further on, moved back (bytes only) to the
    start of a UTF-8 character so no piece ends in half of one."""
    cut = pos + limit
    if isinstance(data, bytes):
        back = cut
        while back > cut - 3 and (data[back] & 0xC0) == 0x80:
            back -= 1
        if (data[back] & 0xC0) != 0x80:
            cut = back
    return cut


def marked(text: str, complete: bool) -> str:
    """``text`` as a relay prints it: a piece with more of its line to come ends in the mark."""
    return text if complete else text + LINE_CONTINUES


class LineSink:
    """A text sink that hands whole lines to a subclass: the shape of every driver-side filter of
    rank output.

    The runners write rank output in arbitrary pieces from their service threads; a subclass sees
    one line at a time (``_line``), under a lock, and never raises into the runner. The runners
    already cut long lines, so the bound here only keeps a writer that does not from costing
    memory: a longer line reaches ``_line`` in marked pieces."""

    def __init__(self):
        self._lines = LineAssembler(MAX_LINE_BYTES + RELAYED_LINE_SLACK)
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            for line, complete in self._lines.feed(text):
                self._line(marked(line, complete))
        return len(text)

    def close(self) -> None:
        """Pass on a last line that never got its newline, then ``_closed``."""
        with self._lock:
            rest = self._lines.rest("")
            if rest:
                self._line(rest)
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
