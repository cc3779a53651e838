"""The built-in data module: per-rank batches straight from Parquet, row group by row group, with pyarrow."""
import itertools
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from horovod_spark.data.prefetch import BackgroundIterator, in_bursts, queue_bound
from horovod_spark.data.reader import Reader, ReaderStats
from horovod_spark.data.row_group_cache import RowGroupCache
from horovod_spark.data.sharding import Slice, default_steps_per_epoch, epoch_order, epoch_plan
from horovod_spark.data.shuffle_buffer import Rebatcher, ShuffleBuffer, chunk_rows, default_capacity

_iterator_ids = itertools.count()


class ArrowReader(Reader):
    """Reads this rank's shard of the row groups under ``path``.

    Per epoch, row groups are put in an order drawn from (seed, epoch) (the same on every rank)
    and each rank takes a contiguous, disjoint range of rows of that order (see sharding.py);
    rows then pass through a shuffle buffer of ``shuffle_buffer_rows`` rows (default: one row
    group or 4 MiB of rows, whichever is fewer; raise it for more mixing across row groups) and
    are cut into batches of exactly ``batch_size``. ``shuffle=False``
    keeps file order (for evaluation).

    Row groups are read by ``read_threads`` threads, in order, a few ahead; batches are assembled
    (and ``transformation_fn`` applied) in a background thread, at least ``prefetch_batches``
    ahead; without a ``transformation_fn`` they are handed over a chunk (row group) at a time.
    A training loop should keep one ``iter_batches(start_epoch, num_epochs)`` iterator open and
    take ``steps_per_epoch`` batches per epoch: read-ahead then runs across epoch boundaries,
    where ``iter_epoch`` starts each epoch cold.

    ``cache_in_memory=True`` keeps every decoded row group in memory while it fits (see
    row_group_cache.py; ``cache_max_bytes`` caps it), so later epochs, and later iterators of this
    reader, decode each row group at most once; ``cache`` then tells what it holds.
    """

    def __init__(self, store, path: str, *, batch_size: int, rank: int = 0, num_ranks: int = 1,
                 columns: Optional[Sequence[str]] = None, shuffle: bool = True, seed: int = 0,
                 shuffle_buffer_rows: Optional[int] = None, steps_per_epoch: Optional[int] = None,
                 transformation_fn: Optional[Callable[[dict], object]] = None, prefetch_batches: int = 4,
                 read_threads: int = 2, cache_in_memory: bool = False, cache_max_bytes: Optional[int] = None):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1, got %r" % (batch_size,))
        if not 0 <= rank < num_ranks:
            raise ValueError("rank %r is not in [0, %r)" % (rank, num_ranks))
        self.store, self.path = store, path
        self.batch_size, self.rank, self.num_ranks = batch_size, rank, num_ranks
        self.shuffle, self.seed = shuffle, seed
        self.transformation_fn = transformation_fn
        self.prefetch_batches, self.read_threads = prefetch_batches, read_threads
        self.stats = ReaderStats()
        self.cache: Optional[RowGroupCache] = RowGroupCache(cache_max_bytes) if cache_in_memory else None
        self._spare_buffers: List[ShuffleBuffer] = []

        dataset = ds.dataset(store.fs_path(path), filesystem=store.filesystem(), format="parquet")
        self.columns: List[str] = list(columns) if columns is not None else list(dataset.schema.names)
        missing = [c for c in self.columns if c not in dataset.schema.names]
        if missing:
            raise ValueError("column(s) %s not in the data at %s (it has %s)" % (missing, path, dataset.schema.names))
        self._units = []  # one fragment per row group, in file then row-group order on every rank
        for fragment in sorted(dataset.get_fragments(), key=lambda f: f.path):
            self._units.extend(fragment.split_by_row_group())
        self._unit_rows = [unit.row_groups[0].num_rows for unit in self._units]
        self.total_rows = int(sum(self._unit_rows))
        if self.total_rows == 0:
            raise ValueError("no rows under %s: nothing to read" % path)
        self.steps_per_epoch = steps_per_epoch or default_steps_per_epoch(self.total_rows, num_ranks, batch_size)
        if shuffle_buffer_rows is None:
            unit_bytes = [unit.row_groups[0].total_byte_size for unit in self._units]
            shuffle_buffer_rows = default_capacity(self._unit_rows, unit_bytes, batch_size)
        self.shuffle_buffer_rows = min(shuffle_buffer_rows, self.steps_per_epoch * batch_size)

    @property
    def num_row_groups(self) -> int:
        return len(self._units)

    def iter_batches(self, start_epoch: int = 0, num_epochs: Optional[int] = None) -> BackgroundIterator:
        def produce():
            return self._produce(start_epoch, num_epochs)

        batch_size = self.batch_size
        stats = self.stats
        return BackgroundIterator(
            produce, queue_bound(self.prefetch_batches, min(self._unit_rows), batch_size, self.transformation_fn),
            name="hs-reader-%d-rank%d" % (next(_iterator_ids), self.rank),
            on_item=lambda item, waited, asked_at: stats.record(batch_size, waited, asked_at))

    # -- producer side (runs in the background thread) ---------------------------------------

    def _produce(self, start_epoch: int, num_epochs: Optional[int]) -> Iterator[dict]:
        pool = (ThreadPoolExecutor(self.read_threads, thread_name_prefix="hs-reader-io-rank%d" % self.rank)
                if self.read_threads > 0 else None)
        buffer = None
        try:
            epochs = (itertools.count(start_epoch) if num_epochs is None
                      else range(start_epoch, start_epoch + num_epochs))
            buffer = self._take_buffer()
            for epoch in epochs:
                yield from self._epoch(epoch, pool, buffer)
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            # Batches never view the pool (they are copies out of it), so it can serve the next
            # iterator even when this one was closed mid-epoch; reset() clears it.
            if buffer is not None:
                self._spare_buffers.append(buffer)

    def _take_buffer(self) -> Optional[ShuffleBuffer]:
        if not self.shuffle or self.shuffle_buffer_rows <= 0:
            return None
        try:
            # A loop calling iter_epoch() reuses the previous epoch's pool instead of faulting in
            # a new one. list.pop is atomic, so concurrent iterators never share one.
            return self._spare_buffers.pop()
        except IndexError:
            return ShuffleBuffer(self.shuffle_buffer_rows, self.batch_size, np.random.default_rng(0))

    def _epoch(self, epoch: int, pool, buffer: Optional[ShuffleBuffer]) -> Iterator[dict]:
        quota = self.steps_per_epoch * self.batch_size
        order = epoch_order(len(self._units), self.seed, epoch, self.shuffle)
        plan = epoch_plan(self._unit_rows, order, self.rank, self.num_ranks, quota)
        if buffer is not None:
            buffer.reset(np.random.default_rng([self.seed, epoch, self.rank]))
        batcher = buffer if buffer is not None else Rebatcher(self.batch_size)
        # One burst per chunk: the consumer takes a row group's batches in one hand-over.
        for chunk in self._read(plan, pool):
            yield from in_bursts(batcher.add(chunk), self.transformation_fn)
        yield from in_bursts(batcher.drain(), self.transformation_fn)
        assert batcher.pending_rows == 0, "epoch plan rows must be a multiple of batch_size"

    def _read(self, plan: List[Slice], pool) -> Iterator[dict]:
        """The plan's slices as numpy chunks, in plan order. A row group that the plan uses again
        (a wrapped-around shard) is read once and kept until its last use, rather than decoded
        again for a few rows."""
        uses = Counter(piece.unit for piece in plan)
        held: Dict[int, Future] = {}

        def fetch(unit: int) -> Future:
            if unit in held:
                return held[unit]
            if pool is not None:
                future = pool.submit(self._load_unit, unit)
            else:
                future = Future()
                future.set_result(self._load_unit(unit))
            if uses[unit] > 1:
                held[unit] = future
            return future

        pieces = iter(plan)
        # Keep a few reads in flight so decoding overlaps batching (with pool, in its threads).
        pending = deque((piece, fetch(piece.unit)) for piece in itertools.islice(pieces, self.read_threads + 1))
        while pending:
            piece, future = pending.popleft()
            chunk = future.result()
            uses[piece.unit] -= 1
            if not uses[piece.unit]:
                held.pop(piece.unit, None)
            for following in itertools.islice(pieces, 1):
                pending.append((following, fetch(following.unit)))
            if piece.start or piece.stop != chunk_rows(chunk):
                chunk = {name: values[piece.start:piece.stop] for name, values in chunk.items()}
            yield chunk

    def _load_unit(self, unit: int) -> dict:
        return self._read_unit(unit) if self.cache is None else self.cache.get(unit, self._read_unit)

    def _read_unit(self, unit: int) -> dict:
        # A row group is the smallest unit Parquet decodes, so it is read whole and sliced after.
        fragment = self._units[unit]
        return table_to_numpy(read_row_group(fragment, self.columns), self.columns, fragment.path)


def read_row_group(fragment, columns: Sequence[str]) -> pa.Table:
    """``columns`` of the single row group of ``fragment`` (a ParquetFileFragment), on this thread.
    A ParquetFile given the fragment's already parsed footer costs less per row group than a
    dataset scan of the fragment (measured: 50 against 58 ms of CPU for a pass over 200,000 rows
    of 64 floats and a label), most of it for Arrow's per-scan set-up on a small column."""
    (row_group,) = fragment.row_groups
    with fragment.filesystem.open_input_file(fragment.path) as source:
        parquet_file = pq.ParquetFile(source, metadata=fragment.metadata, pre_buffer=True)
        return parquet_file.read_row_group(row_group.id, columns=list(columns), use_threads=False)


def table_to_numpy(table: pa.Table, columns: Sequence[str], source: str = "the table") -> dict:
    """Column name -> numpy array; list columns (fixed length per row) become 2-D arrays: the
    list's flat values buffer reshaped to (rows, width), without a copy."""
    missing = [name for name in columns if table.schema.get_field_index(name) < 0]
    if missing:
        raise ValueError("column(s) %s not in %s (it has %s): every file of a dataset needs the columns read"
                         % (missing, source, table.schema.names))
    out = {}
    for name in columns:
        column = table.column(name)
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        if pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or \
                pa.types.is_fixed_size_list(array.type):
            out[name] = _fixed_length_2d(name, array)
        else:
            if array.null_count:
                raise ValueError("column %r has nulls; prepare_data rejects them, was this data written by it?" % name)
            out[name] = array.to_numpy(zero_copy_only=False)
    return out


def _fixed_length_2d(name: str, array) -> np.ndarray:
    rows = len(array)
    values = array.flatten()
    if array.null_count or values.null_count:
        raise ValueError("array column %r has nulls; prepare_data rejects them, was this data written by it?" % name)
    width = len(values) // rows if rows else 0
    if not pa.types.is_fixed_size_list(array.type) and rows:
        offsets = array.offsets.to_numpy()
        if len(values) != rows * width or np.any(np.diff(offsets) != width):
            raise ValueError("array column %r has rows of different lengths; batches need a fixed length" % name)
    return values.to_numpy(zero_copy_only=False).reshape(rows, width)
