"""The Petastorm data module: per-rank batches of the prepared Parquet via ``petastorm.make_batch_reader``.

For users whose pipelines already use Petastorm, on the older stack it needs (see
petastorm_support.py). It honours the Reader contract of the built-in Arrow reader: dicts of numpy
arrays (list columns as 2-D arrays), exactly ``batch_size`` rows per batch, the same
``steps_per_epoch`` on every rank, ``transformation_fn`` applied to each batch.

Sharding is Petastorm's own (``cur_shard``/``shard_count``): rank r reads the row groups whose index
in the dataset's row-group list (files sorted by path, row groups in file order) is r modulo the
number of ranks. Shards are therefore whole row groups and may differ in size, so the default
steps per epoch is enough batches for the largest shard; a rank pads its epoch by reading its
shard again from the start. With fewer row groups than ranks, which Petastorm refuses to shard,
every rank reads the whole dataset. Row groups are decoded by Petastorm's thread pool
in an order that depends on thread timing, so unlike the Arrow reader the row order of an epoch
is not reproducible.
"""
import itertools
import keyword
import math
import re
import warnings
from typing import Callable, Iterator, List, Optional, Sequence

import numpy as np

from horovod_spark.data import petastorm_support
from horovod_spark.data.prefetch import BackgroundIterator, in_bursts, queue_bound
from horovod_spark.data.reader import Reader, ReaderStats
from horovod_spark.data.shuffle_buffer import Rebatcher, ShuffleBuffer, default_capacity

_iterator_ids = itertools.count()


class PetastormReader(Reader):
    """Reads this rank's Petastorm shard of the Parquet under ``path`` in ``store``.

    Options as ArrowReader's, plus: ``read_threads`` is the size of Petastorm's worker pool,
    ``reader_pool_type`` its kind ('thread', 'process' or 'dummy'); ``results_queue_size`` how many
    decoded row groups it may hold ahead."""

    def __init__(self, store, path: str, *, batch_size: int, rank: int = 0, num_ranks: int = 1,
                 columns: Optional[Sequence[str]] = None, shuffle: bool = True, seed: int = 0,
                 shuffle_buffer_rows: Optional[int] = None, steps_per_epoch: Optional[int] = None,
                 transformation_fn: Optional[Callable[[dict], object]] = None, prefetch_batches: int = 4,
                 read_threads: int = 4, results_queue_size: int = 4, reader_pool_type: str = "thread"):
        self._make_batch_reader = petastorm_support.require_petastorm().make_batch_reader
        # Petastorm 0.12 drives pyarrow 14's legacy ParquetDataset, which warns on every reader
        # (from its worker threads too); they are Petastorm's to fix and say nothing to our users.
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"petastorm(\.|$)")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1, got %r" % (batch_size,))
        if not 0 <= rank < num_ranks:
            raise ValueError("rank %r is not in [0, %r)" % (rank, num_ranks))
        if reader_pool_type not in ("thread", "process", "dummy"):
            raise ValueError("reader_pool_type=%r: Petastorm's pools are 'thread', 'process' and 'dummy'"
                             % (reader_pool_type,))
        if read_threads < 1:
            raise ValueError("read_threads must be >= 1 for Petastorm's thread pool, got %r" % (read_threads,))
        self.store, self.path = store, path
        self.batch_size, self.rank, self.num_ranks = batch_size, rank, num_ranks
        self.shuffle, self.seed = shuffle, seed
        self.transformation_fn = transformation_fn
        self.prefetch_batches, self.read_threads = prefetch_batches, read_threads
        self.results_queue_size, self.reader_pool_type = results_queue_size, reader_pool_type
        self.stats = ReaderStats()
        self.url = petastorm_support.dataset_url(store, path)

        names, group_rows, group_bytes = _row_groups(store, path)
        self.columns: List[str] = list(columns) if columns is not None else names
        if not self.columns:
            raise ValueError("columns is empty: name at least one column to read")
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise ValueError("column(s) %s not in the data at %s (it has %s)" % (missing, path, names))
        odd = [c for c in self.columns if not c.isidentifier() or keyword.iskeyword(c)]
        if odd:
            raise ValueError("column(s) %s cannot be read with Petastorm, which turns column names into Python "
                             "identifiers; rename them or use data_module='arrow'" % odd)
        self.total_rows = int(sum(group_rows))
        if self.total_rows == 0:
            raise ValueError("no rows under %s: nothing to read" % path)
        self.num_row_groups = len(group_rows)
        shard_sizes = [_shard_rows(group_rows, r, num_ranks) for r in range(num_ranks)]
        # Petastorm refuses more shards than row groups (on every rank): then every rank reads it all.
        self._sharded = num_ranks > 1 and all(shard_sizes)
        if not self._sharded:
            shard_sizes = [self.total_rows] * num_ranks
        self.own_rows = shard_sizes[rank]
        self.steps_per_epoch = steps_per_epoch or max(1, math.ceil(max(shard_sizes) / batch_size))
        if shuffle_buffer_rows is None:  # as the Arrow reader's
            shuffle_buffer_rows = default_capacity(group_rows, group_bytes, batch_size)
        self.shuffle_buffer_rows = min(shuffle_buffer_rows, self.steps_per_epoch * batch_size)
        self._patterns = [re.escape(c) + "$" for c in self.columns]

    def iter_batches(self, start_epoch: int = 0, num_epochs: Optional[int] = None) -> BackgroundIterator:
        def produce():
            epochs = (itertools.count(start_epoch) if num_epochs is None
                      else range(start_epoch, start_epoch + num_epochs))
            buffer = (ShuffleBuffer(self.shuffle_buffer_rows, self.batch_size, np.random.default_rng(0))
                      if self.shuffle and self.shuffle_buffer_rows > 0 else None)
            for epoch in epochs:
                yield from self._epoch(epoch, buffer)

        batch_size, stats = self.batch_size, self.stats
        # Without a transformation_fn, the batches cut from each record batch Petastorm yields go
        # over as one burst. Its record batches can be far smaller than a row group (about 2,500
        # rows of a 32,000-row group here), so the bound assumes no more than one batch per burst.
        return BackgroundIterator(
            produce, queue_bound(self.prefetch_batches, batch_size, batch_size, self.transformation_fn),
            name="hs-petastorm-%d-rank%d" % (next(_iterator_ids), self.rank),
            on_item=lambda item, waited, asked_at: stats.record(batch_size, waited, asked_at))

    # -- producer side (runs in the background thread) ---------------------------------------

    def _epoch(self, epoch: int, buffer: Optional[ShuffleBuffer]) -> Iterator[dict]:
        remaining = self.steps_per_epoch * self.batch_size
        if buffer is not None:
            buffer.reset(np.random.default_rng([self.seed, epoch, self.rank]))
        batcher = buffer if buffer is not None else Rebatcher(self.batch_size)
        # Pass 0 is the shard once; later passes pad the epoch to its quota from the shard's start.
        for shard_pass in itertools.count():
            before = remaining
            for chunk in self._read_pass(epoch, shard_pass, remaining):
                remaining -= len(chunk[self.columns[0]])
                yield from in_bursts(batcher.add(chunk), self.transformation_fn)
            if remaining == 0:
                break
            if remaining == before:
                raise RuntimeError("Petastorm returned no rows for rank %d's shard of %s" % (self.rank, self.url))
        yield from in_bursts(batcher.drain(), self.transformation_fn)
        assert batcher.pending_rows == 0, "an epoch's rows must be a multiple of batch_size"

    def _read_pass(self, epoch: int, shard_pass: int, limit: int) -> Iterator[dict]:
        """Up to ``limit`` rows of one pass over the shard. A pass gets a reader of its own (one
        epoch of Petastorm's): with one reader over several epochs, its threads would mix rows of
        the next pass into this one."""
        options = dict(schema_fields=self._patterns, reader_pool_type=self.reader_pool_type,
                       workers_count=self.read_threads, results_queue_size=self.results_queue_size,
                       shuffle_row_groups=self.shuffle, num_epochs=1,
                       storage_options=petastorm_support.storage_options(self.store))
        if self.shuffle:
            options["seed"] = int(np.random.SeedSequence([self.seed, epoch, shard_pass]).generate_state(1)[0])
        if self._sharded:
            options.update(cur_shard=self.rank, shard_count=self.num_ranks)
        reader = self._make_batch_reader(self.url, **options)
        try:
            for batch in reader:
                chunk = {name: np.asarray(getattr(batch, name)) for name in self.columns}
                rows = len(chunk[self.columns[0]])
                if rows == 0:
                    continue
                if rows >= limit:
                    yield {k: v[:limit] for k, v in chunk.items()} if rows > limit else chunk
                    return
                limit -= rows
                yield chunk
        finally:
            reader.stop()
            reader.join()


def _row_groups(store, path: str):
    """(column names, rows of each row group, bytes of each) in Petastorm's row-group order: files
    sorted by path (pyarrow's listing, which skips names starting with '.' or '_', as Petastorm's
    does), then row groups in file order."""
    import pyarrow.dataset as ds
    dataset = ds.dataset(store.fs_path(path), filesystem=store.filesystem(), format="parquet")
    groups = [unit.row_groups[0] for fragment in sorted(dataset.get_fragments(), key=lambda f: f.path)
              for unit in fragment.split_by_row_group()]
    return list(dataset.schema.names), [g.num_rows for g in groups], [g.total_byte_size for g in groups]


def _shard_rows(group_rows: Sequence[int], rank: int, num_ranks: int) -> int:
    return int(sum(group_rows[rank::num_ranks]))
