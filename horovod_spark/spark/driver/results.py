"""How a rank's return value reaches ``horovod_spark.run`` without passing through the driver JVM.

A Spark task result is held whole in the driver JVM's heap (and in the executor's on the way): two
200 MB results are enough to exhaust Spark's default 1 GiB driver and stop the user's
SparkContext. So the task streams the rank's pickled result over the driver service, in chunks
well under the frame cap, into a private spool file on the driver, and returns only a marker to
Spark. The driver unpickles each file once the Spark job is done.

Ops added to the driver service (plain wire values):
  result_begin(rank, size)          -> None | message (the run refuses a result this large)
  result_chunk(rank, offset, bytes) -> None  (idempotent: a resend writes the same bytes again)
  result_end(rank, size)            -> None
"""
import os
import tempfile
import threading
from typing import Any, Dict, Optional

import cloudpickle

from horovod_spark.common import config
from horovod_spark.common.kv_server import RequestError
from horovod_spark.spark.task import run_dir

CHUNK_BYTES = 4 * 1024 * 1024
# Unpickling needs about the pickle's size again on top of what the driver already uses.
_MEMORY_HEADROOM = 0.9


def _mib(n: int) -> str:
    return "%.1f MiB" % (n / 1024.0 ** 2)


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None  # absent, or "max" (no limit)


def available_memory() -> Optional[int]:
    """What new allocations can still get: the kernel's MemAvailable, lowered to what is left under
    this process's cgroup (v2) limit when it has one (containers); None where unknown."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    limit, used = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if limit is not None and used is not None:
        left = max(0, limit - used)
        available = left if available is None else min(available, left)
    return available


class ResultSpool:
    """The driver side: one spool file per rank in a 0700 directory, removed by ``close()``."""

    def __init__(self, service, max_bytes: Optional[int] = None):
        self._service = service
        self._num_proc = service.num_proc
        self._max_bytes = max_bytes if max_bytes is not None else config.SPARK_MAX_RESULT_BYTES.get()
        self._dir = tempfile.mkdtemp(prefix="horovod_spark-results-")
        self._lock = threading.Lock()
        self._sizes: Dict[int, int] = {}
        self._complete: Dict[int, bool] = {}
        for op, fn in (("result_begin", self._begin), ("result_chunk", self._chunk), ("result_end", self._end)):
            service.add_handler(op, fn)

    def _path(self, rank: int) -> str:
        return os.path.join(self._dir, "rank-%d.pkl" % rank)

    def _rank(self, value) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self._num_proc:
            raise RequestError("rank must be an int in [0, %d), got %r" % (self._num_proc, value))
        return value

    def _begin(self, rank, size):
        rank = self._rank(rank)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise RequestError("size must be a non-negative int")
        refusal = self._refusal(rank, size)
        if refusal is not None:
            self._service.record_failure(rank, "ResultTooLarge", refusal)
            return refusal
        with self._lock:
            self._sizes[rank] = size
            self._complete[rank] = False
            run_dir.write_private(self._path(rank), b"")
        return None

    def _refusal(self, rank: int, size: int) -> Optional[str]:
        if size > self._max_bytes:
            return ("rank %d returned a value whose pickle is %s (%d bytes), above the limit of %s "
                    "(%s). Return something smaller, e.g. write large results to shared storage "
                    "(a Store) on the ranks and return their paths, or raise %s."
                    % (rank, _mib(size), size, _mib(self._max_bytes), config.SPARK_MAX_RESULT_BYTES.name,
                       config.SPARK_MAX_RESULT_BYTES.name))
        with self._lock:
            others = sum(s for r, s in self._sizes.items() if r != rank)
        available = available_memory()
        if available is not None and size + others > _MEMORY_HEADROOM * available:
            return ("rank %d returned a value whose pickle is %s (%d bytes); with the other ranks' %s "
                    "the driver would need more memory than it has available (%s): unpickling it would "
                    "exhaust the driver. Return something smaller, e.g. write large results to shared "
                    "storage (a Store) on the ranks and return their paths."
                    % (rank, _mib(size), size, _mib(others), _mib(available)))
        return None

    def _chunk(self, rank, offset, data):
        rank = self._rank(rank)
        if isinstance(offset, bool) or not isinstance(offset, int) or not isinstance(data, bytes):
            raise RequestError("a result chunk is (rank, offset: int, data: bytes)")
        with self._lock:
            size = self._sizes.get(rank)
            if size is None or offset < 0 or offset + len(data) > size:
                raise RequestError("result chunk at %d+%d does not fit rank %d's announced %r bytes"
                                   % (offset, len(data), rank, size))
            path = self._path(rank)
        # Written outside the lock: ranks stream in parallel; each writes only its own file.
        try:
            with open(path, "r+b") as f:
                f.seek(offset)
                f.write(data)
        except OSError as exc:
            message = ("the driver could not write rank %d's result (%s) to %s: %s. Free space there, or point "
                       "TMPDIR on the driver to a filesystem with room for the ranks' results"
                       % (rank, _mib(size), self._dir, exc))
            self._service.record_failure(rank, "ResultSpoolError", message)
            raise RequestError(message) from None
        return None

    def _end(self, rank, size):
        rank = self._rank(rank)
        with self._lock:
            if self._sizes.get(rank) != size or os.path.getsize(self._path(rank)) != size:
                raise RequestError("rank %d's result ended at %r bytes, not the announced %r"
                                   % (rank, size, self._sizes.get(rank)))
            self._complete[rank] = True
        return None

    def load(self, rank: int) -> Any:
        with self._lock:
            complete = self._complete.get(rank, False)
        if not complete:
            raise RuntimeError("rank %d finished but its result never fully reached the driver" % rank)
        with open(self._path(rank), "rb") as f:
            value = cloudpickle.load(f)
        os.unlink(self._path(rank))  # the disk space goes back as soon as the value is in memory
        return value

    def close(self) -> None:
        run_dir.remove(self._dir)


def send(client, rank: int, path: str) -> Optional[str]:
    """The task side: stream the rank's result file to the driver. Returns the driver's refusal
    message when it will not take a result this large, else None."""
    size = os.path.getsize(path)
    refusal = client.request("result_begin", rank, size)
    if refusal is not None:
        return refusal
    with open(path, "rb") as f:
        offset = 0
        while offset < size:
            data = f.read(CHUNK_BYTES)
            if not data:
                raise RuntimeError("rank %d's result file shrank while being sent" % rank)
            client.request("result_chunk", rank, offset, data)
            offset += len(data)
    client.request("result_end", rank, size)
    return None
