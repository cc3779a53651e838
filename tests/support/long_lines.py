"""A rank that prints long lines without a newline until their end, and a driver-side sink that
times their relay and counts what arrived, keeping none of it in memory."""
import os
import threading
import time

MB = 1 << 20


def print_long_lines(sizes):
    """Rank 0 prints ``begin <n>``, one line of n 'x' written 1 MB at a time, then ``end <n>``."""
    import sys
    if os.environ.get("HOROVOD_RANK", "0") != "0":
        return None
    block = "x" * MB
    for n in sizes:
        sys.stdout.write("begin %d\n" % n)
        sys.stdout.flush()
        for _ in range(n // MB):
            sys.stdout.write(block)
            sys.stdout.flush()
        sys.stdout.write("\nend %d\n" % n)
        sys.stdout.flush()
    return None


class TimedSink:
    """The launcher's stdout: notes when each ``begin``/``end`` line arrived and counts the 'x'
    bytes and the lines carrying ``mark``."""

    def __init__(self, mark: str):
        self.mark = mark
        self.arrived = {}
        self.x_bytes = 0
        self.marked_lines = 0

    def write(self, text: str) -> int:
        now = time.monotonic()
        for tag in ("begin", "end"):
            at = text.find(">:%s " % tag)
            if at >= 0:
                n = int(text[at + len(tag) + 3:].split("\n", 1)[0])
                self.arrived[(tag, n)] = now
        self.x_bytes += text.count("x")
        self.marked_lines += text.count(self.mark + "\n")
        return len(text)

    def flush(self):
        pass

    def relay_seconds(self, n: int) -> float:
        return self.arrived[("end", n)] - self.arrived[("begin", n)]


class PeakRss:
    """The highest resident set size of this process while the ``with`` block ran, above its start."""

    def __enter__(self):
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def growth(self) -> int:
        return self.peak - self.start


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
