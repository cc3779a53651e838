"""``run_elastic``'s rank output on the driver, printed as ``run()`` prints its ranks' lines.

On the executor, the supervisor that runs a worker's rank process writes the rank's lines into a
``TaskOutput`` instead of the Python worker's own stdout/stderr (which only reach the executor's
log); the task's loop ships what collected, between heartbeats, with the ``elastic_output`` op.
On the driver, ``DriverOutput`` hands each worker's chunks to ``output.OutputSink``, so the lines
appear as ``[worker]<stdout>:text`` (the worker number, which stays fixed while the rank changes
from reset to reset), optionally timestamped, and the core's stall warnings reach the driver's log.
"""
import collections
import threading
import time
from typing import Deque, List, Optional, Tuple

from horovod_spark.common.kv_server import KVStoreServer, RequestError
from horovod_spark.common.line_sink import MAX_LINE_BYTES, RELAYED_LINE_SLACK

OP_OUTPUT = "elastic_output"
STREAMS = ("stdout", "stderr")

# One request carries at most this much; a task that cannot reach the driver keeps at most
# _MAX_PENDING_BYTES and drops its oldest lines beyond that, so a lost driver cannot fill its memory.
_BATCH_BYTES = 256 * 1024
_MAX_PENDING_BYTES = 8 * 1024 * 1024
# The longest line the task's supervisor passes on whole: its marked pieces then stay within the
# driver's bound, which would otherwise cut them a second time.
RELAYED_LINE_LIMIT = MAX_LINE_BYTES - RELAYED_LINE_SLACK

Chunk = Tuple[str, float, bytes]


class _Stream:
    """The text sink the supervisor's output pump writes one stream's whole lines to."""

    def __init__(self, output: "TaskOutput", name: str):
        self._output = output
        self._name = name

    def write(self, text: str) -> int:
        self._output.add(self._name, text)
        return len(text)

    def flush(self) -> None:
        pass  # shipped by the task's loop


class TaskOutput:
    """A worker's output waiting to be shipped to the driver, in the order it was written."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending: Deque[Chunk] = collections.deque()
        self._pending_bytes = 0
        self._dropped = 0
        self._unsent: Optional[List[Chunk]] = None  # a batch whose request failed: resent as it was
        self._seq = 0
        self.stdout = _Stream(self, "stdout")
        self.stderr = _Stream(self, "stderr")

    def add(self, stream: str, text: str) -> None:
        data = text.encode("utf-8", "replace")
        with self._lock:
            self._pending.append((stream, time.time(), data))
            self._pending_bytes += len(data)
            while self._pending_bytes > _MAX_PENDING_BYTES and len(self._pending) > 1:
                self._pending_bytes -= len(self._pending.popleft()[2])
                self._dropped += 1

    def _next_batch(self) -> List[Chunk]:
        with self._lock:
            batch: List[Chunk] = []
            if self._dropped:
                note = "[horovod_spark] %d chunk(s) of this rank's output were dropped: the driver was " \
                       "unreachable\n" % self._dropped
                batch.append(("stderr", time.time(), note.encode()))
                self._dropped = 0
            size = 0
            while self._pending and (not batch or size + len(self._pending[0][2]) <= _BATCH_BYTES):
                chunk = self._pending.popleft()
                self._pending_bytes -= len(chunk[2])
                size += len(chunk[2])
                batch.append(chunk)
            return batch

    def ship(self, client, worker: int, max_batches: Optional[int] = 16) -> bool:
        """Send what was written so far, in up to ``max_batches`` requests (None: all; a rank that
        writes without pause must not keep its task's loop from its heartbeat). False, keeping what
        was not sent, when the driver did not answer, so the next call tries again. Each batch has a
        sequence number, so a batch the driver received before its reply was lost is not printed
        twice."""
        sent = 0
        while max_batches is None or sent < max_batches:
            batch = self._unsent if self._unsent is not None else self._next_batch()
            if not batch:
                return True
            try:
                client.request(OP_OUTPUT, worker, self._seq, batch)
            except (OSError, TimeoutError):
                self._unsent = batch
                return False
            self._unsent = None
            self._seq += 1
            sent += 1
        return True


class DriverOutput:
    """Serves ``elastic_output`` on the job's service: prints each worker's chunks through ``sink``
    (an ``output.OutputSink``), once per sequence number, in order."""

    def __init__(self, server: KVStoreServer, sink):
        self._server = server
        self._sink = sink
        self._seen = {}
        server.add_handler(OP_OUTPUT, self._output)

    def _output(self, worker, seq, chunks):
        for value in (worker, seq):
            if isinstance(value, bool) or not isinstance(value, int):
                raise RequestError("elastic_output takes (worker number, sequence number, chunks)")
        if not isinstance(chunks, list) or not all(
                isinstance(c, tuple) and len(c) == 3 and c[0] in STREAMS and isinstance(c[1], float)
                and isinstance(c[2], bytes) for c in chunks):
            raise RequestError("elastic_output's chunks must be a list of (stream, time, bytes)")
        with self._server.condition:
            if seq <= self._seen.get(worker, -1):
                return None  # a resend after a lost reply: printed already
            self._seen[worker] = seq
        # Printed outside the service's condition, so a slow console never holds up the ranks'
        # rendezvous; a worker's order holds anyway, as it sends its next batch only after this reply.
        self._sink(worker, chunks)
        return None
