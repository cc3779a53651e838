"""Run a producer generator in a background thread, handing items over through a bounded queue.

The thread never holds a reference to the consumer-side object, so dropping the iterator (or
calling close()) stops it; an exception in the producer is re-raised in the consumer, with the
producer's traceback.

A producer may yield a ``Burst`` (a list) of items; the consumer still receives them one at a
time, but the hand-over (a lock, and a thread wake-up whenever the consumer is ahead) happens once
per burst. A reader that cuts a decoded row group into a hundred batches hands them over as one.
"""
import queue
import threading
import time
import weakref
from typing import Callable, Iterator, Optional

_END = object()
_POLL_SECONDS = 0.05
_JOIN_SECONDS = 30.0


class Burst(list):
    """Items produced together, handed to the consumer in one queue operation."""


def in_bursts(batches: Iterator, transformation_fn: Optional[Callable] = None) -> Iterator:
    """What a reader's producer yields for one decoded chunk's ``batches``: one Burst, or with a
    ``transformation_fn`` each transformed batch on its own (a transformation costs more than a
    hand-over, so the consumer starts on the first while the rest are transformed, and those
    finished before a failing call still arrive)."""
    if transformation_fn is None:
        yield Burst(batches)
        return
    for batch in batches:
        yield transformation_fn(batch)


def queue_bound(prefetch_batches: int, chunk_rows: int, batch_size: int,
                transformation_fn: Optional[Callable] = None) -> int:
    """A BackgroundIterator's ``maxsize`` that keeps at least ``prefetch_batches`` batches ahead
    when the producer yields ``in_bursts`` of chunks of at least ``chunk_rows`` rows."""
    per_item = 1 if transformation_fn is not None else chunk_rows // batch_size
    return max(1, -(-prefetch_batches // max(1, per_item)))


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _run(produce: Callable[[], Iterator], items: "queue.Queue", stop: threading.Event) -> None:
    def put(item) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    generator = None
    try:
        generator = produce()
        for item in generator:
            if not put(item):
                return
        put(_END)
    except BaseException as exc:  # handed to the consumer, which re-raises it
        put(_Failure(exc))
    finally:
        if generator is not None:
            # Runs the producer's own cleanup (e.g. shutting down its read pool) in this thread.
            generator.close()


def _shutdown(stop: threading.Event, items: "queue.Queue", thread: threading.Thread) -> None:
    stop.set()
    while True:  # free the producer if it is blocked on a full queue
        try:
            items.get_nowait()
        except queue.Empty:
            break
    if thread is not threading.current_thread():
        thread.join(_JOIN_SECONDS)


class BackgroundIterator:
    """Iterates over ``produce()`` run in a daemon thread, at most ``maxsize`` items ahead.

    ``on_item(item, waited_seconds, started_at)`` is called for each item the consumer takes
    (throughput accounting without touching the items)."""

    def __init__(self, produce: Callable[[], Iterator], maxsize: int, name: str,
                 on_item: Optional[Callable[[object, float, float], None]] = None):
        self._items: "queue.Queue" = queue.Queue(maxsize=max(1, maxsize))
        self._stop = threading.Event()
        self._on_item = on_item
        self._done = False
        # The current burst, reversed: pop() hands out its next item and drops the burst's
        # reference, so batches already taken are not kept alive until the burst ends.
        self._burst: list = []
        self._thread = threading.Thread(target=_run, args=(produce, self._items, self._stop), name=name, daemon=True)
        self._finalize = weakref.finalize(self, _shutdown, self._stop, self._items, self._thread)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        start = time.perf_counter()
        item = self._burst.pop() if self._burst else _END
        while item is _END:  # also skips an empty burst
            item = self._items.get()
            if type(item) is not Burst:
                break
            item.reverse()
            self._burst = item
            item = self._burst.pop() if self._burst else _END
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.exc
        if self._on_item is not None:
            self._on_item(item, time.perf_counter() - start, start)
        return item

    def close(self) -> None:
        """Stop the producer and wait for its thread to end. Safe to call more than once."""
        self._done = True
        self._finalize()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
