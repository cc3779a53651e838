"""Row-level shuffling and fixed-size batching of column chunks (dicts of equal-length numpy arrays)."""
from typing import Dict, Iterator, List

import numpy as np

Chunk = Dict[str, np.ndarray]


def chunk_rows(chunk: Chunk) -> int:
    return len(next(iter(chunk.values()))) if chunk else 0


def take(chunk: Chunk, index) -> Chunk:
    return {name: values[index] for name, values in chunk.items()}


class ShuffleBuffer:
    """A fixed-capacity pool of rows. Each incoming row replaces a uniformly chosen pooled row,
    which is emitted; so every row is copied in and out once, whatever the capacity (a pool that
    is re-permuted on every refill would copy each row capacity/chunk times)."""

    def __init__(self, capacity: int, rng: np.random.Generator):
        if capacity < 1:
            raise ValueError("shuffle buffer capacity must be >= 1")
        self.capacity = capacity
        self._rng = rng
        self._pool: Chunk = {}
        self._fill = 0

    def add(self, chunk: Chunk) -> List[Chunk]:
        n = chunk_rows(chunk)
        out: List[Chunk] = []
        offset = 0
        if self._fill < self.capacity:
            offset = min(n, self.capacity - self._fill)
            self._store(chunk, 0, offset)
        while offset < n:
            m = min(n - offset, self.capacity)
            slots = self._rng.choice(self.capacity, size=m, replace=False)
            out.append(take(self._pool, slots))
            for name, values in self._pool.items():
                values[slots] = chunk[name][offset:offset + m]
            offset += m
        return out

    def reset(self, rng: np.random.Generator) -> None:
        """Empty it for the next epoch, keeping the allocated pool: a fresh pool every epoch would
        pay for page faults on its whole size again."""
        self._rng = rng
        self._fill = 0

    def drain(self) -> Chunk:
        """The remaining rows in random order; the buffer is empty afterwards."""
        if not self._fill:
            return {}
        order = self._rng.permutation(self._fill)
        out = {name: values[:self._fill][order] for name, values in self._pool.items()}
        self._fill = 0
        return out

    def _store(self, chunk: Chunk, start: int, stop: int) -> None:
        if not self._pool:
            self._pool = {name: np.empty((self.capacity,) + values.shape[1:], dtype=values.dtype)
                          for name, values in chunk.items()}
        count = stop - start
        for name, values in self._pool.items():
            values[self._fill:self._fill + count] = chunk[name][start:stop]
        self._fill += count


class Rebatcher:
    """Cuts a stream of chunks of any size into batches of exactly ``batch_size`` rows. Batches
    inside a chunk are slices of it (no copy); only a batch spanning chunks is concatenated."""

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self._pending: List[Chunk] = []
        self._pending_rows = 0

    @property
    def pending_rows(self) -> int:
        return self._pending_rows

    def push(self, chunk: Chunk) -> Iterator[Chunk]:
        n = chunk_rows(chunk)
        start = 0
        if self._pending:
            need = self.batch_size - self._pending_rows
            if n < need:
                if n:
                    self._pending.append(chunk)
                    self._pending_rows += n
                return
            pieces = self._pending + [{k: v[:need] for k, v in chunk.items()}]
            self._pending, self._pending_rows = [], 0
            yield {k: np.concatenate([p[k] for p in pieces]) for k in chunk}
            start = need
        while n - start >= self.batch_size:
            yield {k: v[start:start + self.batch_size] for k, v in chunk.items()}
            start += self.batch_size
        if start < n:
            self._pending = [{k: v[start:] for k, v in chunk.items()}]
            self._pending_rows = n - start
