"""Warnings about refused connections, rate-limited and summarised.

Every connection that fails the handshake or a frame's MAC is worth a line, but an attacker can
make hundreds a second and bury the job's own output. So within each interval the first few such
lines are written as they come, with their detail, and the rest are only counted per source
address and reason; one summary line at the interval's end (or at ``close``) gives the counts.
"""
import collections
import threading
import time
from typing import Optional

DEFAULT_INTERVAL_S = 10.0
DEFAULT_BURST = 5
# Distinct (source, reason) pairs counted per interval; more are counted under "other sources", so
# an attacker with many addresses cannot make the counts themselves grow without bound.
_MAX_KEYS = 256
_SUMMARY_SOURCES = 10


class RateLimitedLog:
    """``warning(source, reason, fmt, *args)``: ``fmt % args`` goes to ``logger`` while fewer than
    ``burst`` lines were written in the current interval of ``interval`` seconds; later ones are
    counted per (source, reason) and summarised in one line, prefixed ``prefix``."""

    def __init__(self, logger, prefix: str, interval: float = DEFAULT_INTERVAL_S, burst: int = DEFAULT_BURST):
        self._logger = logger
        self._prefix = prefix
        self._interval = interval
        self._burst = burst
        self._lock = threading.Lock()
        self._window_start = time.monotonic()
        self._written = 0
        self._counts = collections.Counter()
        self._timer: Optional[threading.Timer] = None
        self._closed = False

    def warning(self, source: str, reason: str, fmt: str, *args) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._window_start >= self._interval:
                self._summarise_locked(now)
            if self._written < self._burst:
                self._written += 1
                self._logger.warning(fmt, *args)
                return
            key = (source, reason)
            if key not in self._counts and len(self._counts) >= _MAX_KEYS:
                key = ("other sources", reason)
            self._counts[key] += 1
            if self._timer is None and not self._closed:
                # The summary must come even if the flood stops here.
                self._timer = threading.Timer(max(0.0, self._window_start + self._interval - now), self._on_timer)
                self._timer.daemon = True
                self._timer.start()

    def close(self) -> None:
        """Write the summary of what was counted so far; no timer runs afterwards."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._summarise_locked(time.monotonic())

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            self._summarise_locked(time.monotonic())

    def _summarise_locked(self, now: float) -> None:
        if self._counts:
            by_source = collections.defaultdict(list)
            for (source, reason), n in self._counts.most_common():
                by_source[source].append("%d %s" % (n, reason))
            sources = list(by_source.items())
            listed = "; ".join("%s: %s" % (source, ", ".join(parts)) for source, parts in sources[:_SUMMARY_SOURCES])
            if len(sources) > _SUMMARY_SOURCES:
                listed += "; and %d more sources" % (len(sources) - _SUMMARY_SOURCES)
            self._logger.warning("%s: %d more refused connection(s) in the last %.3g s, not logged one by one: %s",
                                 self._prefix, sum(self._counts.values()), now - self._window_start, listed)
            self._counts.clear()
        self._window_start = now
        self._written = 0
