"""Decoded row groups kept in memory for a reader's later epochs (the estimators' ``inmemory_cache_all``).

A row group is decoded from the files the first time any epoch needs it and served from memory
afterwards, as long as it fits: a row group is kept only while the machine would still have
``reserve`` bytes available after keeping it (and the cache stays under ``max_bytes`` if given),
so a dataset too big for memory is partly cached, never a cause of swapping or the OOM killer.
Cached arrays are made read-only, so that a consumer writing into a batch (which may be a view of
them) fails loudly instead of changing every later epoch's data.
"""
import os
import threading
from typing import Callable, Dict, Optional

import numpy as np

# Memory left to everything else on the host: the larger of this share of the total and 1 GiB.
RESERVE_SHARE = 0.2
RESERVE_MIN_BYTES = 1 << 30


def _meminfo() -> Dict[str, int]:
    """/proc/meminfo in bytes; {} where there is none."""
    try:
        with open("/proc/meminfo") as f:
            out = {}
            for line in f:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    out[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
            return out
    except (OSError, ValueError):
        return {}


def available_bytes() -> Optional[int]:
    """Memory the kernel could hand out now without swapping (None: unknown)."""
    info = _meminfo()
    if "MemAvailable" in info:
        return info["MemAvailable"]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def default_reserve() -> int:
    total = _meminfo().get("MemTotal", 0)
    return max(RESERVE_MIN_BYTES, int(total * RESERVE_SHARE))


def chunk_bytes(chunk: Dict[str, np.ndarray]) -> int:
    return sum(int(values.nbytes) for values in chunk.values())


class RowGroupCache:
    """Row group index -> decoded chunk. ``reads``: row groups decoded from the files; ``hits``:
    served from memory; ``not_kept``: decoded ones that did not fit (read again when needed)."""

    def __init__(self, max_bytes: Optional[int] = None, reserve: Optional[int] = None):
        if max_bytes is not None and max_bytes < 0:
            raise ValueError("max_bytes must be >= 0, got %r" % (max_bytes,))
        self.max_bytes = max_bytes
        self.reserve = default_reserve() if reserve is None else reserve
        self._chunks: Dict[int, dict] = {}
        self._lock = threading.Lock()
        self.bytes = 0
        self.reads = 0
        self.hits = 0
        self.not_kept = 0

    def __len__(self) -> int:
        return len(self._chunks)

    def get(self, unit: int, read: Callable[[int], dict]) -> dict:
        """The chunk of row group ``unit``: from memory, else ``read(unit)`` (kept if it fits)."""
        with self._lock:
            chunk = self._chunks.get(unit)
            if chunk is not None:
                self.hits += 1
                return chunk
        chunk = read(unit)  # outside the lock: reads of different row groups overlap
        size = chunk_bytes(chunk)
        with self._lock:
            self.reads += 1
            if unit in self._chunks:  # another thread read it meanwhile
                return self._chunks[unit]
            if not self._fits(size):
                self.not_kept += 1
                return chunk
            for values in chunk.values():
                values.setflags(write=False)
            self._chunks[unit] = chunk
            self.bytes += size
        return chunk

    def _fits(self, size: int) -> bool:
        if self.max_bytes is not None and self.bytes + size > self.max_bytes:
            return False
        available = available_bytes()
        return available is None or available - size >= self.reserve

    def clear(self) -> None:
        with self._lock:
            self._chunks.clear()
            self.bytes = 0

    def summary(self) -> str:
        text = "%d row group(s) cached in memory (%.1f MiB); %d read from files, %d served from memory" % (
            len(self._chunks), self.bytes / (1 << 20), self.reads, self.hits)
        if self.not_kept:
            text += "; %d did not fit and are read from files each time" % self.not_kept
        return text
