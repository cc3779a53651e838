"""The readers a rank trains and validates with, built from a TrainSpec (no pyspark, no framework)."""
import multiprocessing
import sys
from typing import Iterator, Optional

from horovod_spark.data import make_reader

from .spec import TrainSpec


def set_mp_start_method(spec: TrainSpec) -> None:
    """Horovod's mp_start_method: multiprocessing's start method for whatever the rank starts."""
    if spec.mp_start_method:
        multiprocessing.set_start_method(spec.mp_start_method, force=True)


def train_reader(spec: TrainSpec, rank: int, size: int, transformation_fn=None):
    options = dict(columns=spec.columns, shuffle=spec.shuffle, seed=spec.seed,
                   steps_per_epoch=spec.train_steps_per_epoch, transformation_fn=transformation_fn)
    if spec.shuffle_buffer_rows is not None:
        options["shuffle_buffer_rows"] = spec.shuffle_buffer_rows
    options.update(_cache_options(spec), **spec.train_reader_options)
    return make_reader(spec.data_module, store=spec.store, path=spec.train_path, batch_size=spec.batch_size,
                       rank=rank, num_ranks=size, **options)


def val_reader(spec: TrainSpec, rank: int, size: int, transformation_fn=None):
    if spec.val_path is None:
        return None
    # In file order: every epoch validates on the same rows, and each rank's shard comes first
    # in its plan (see data/sharding.py), which val_batches relies on.
    return make_reader(spec.data_module, store=spec.store, path=spec.val_path, batch_size=spec.val_batch_size,
                       rank=rank, num_ranks=size, columns=spec.columns, shuffle=False, seed=spec.seed,
                       steps_per_epoch=spec.validation_steps_per_epoch, transformation_fn=transformation_fn,
                       **_cache_options(spec), **spec.val_reader_options)


def _cache_options(spec: TrainSpec) -> dict:
    # Only when asked: data modules other than the Arrow reader take no cache options.
    return {"cache_in_memory": True} if spec.inmemory_cache_all else {}


def report_cache(spec: TrainSpec, rank: int, train, val) -> None:
    """One line per cached reader on the rank's stdout: always at verbose 2, at verbose 1 only when
    the data did not fit (the user asked for caching and does not fully get it)."""
    for what, reader in (("training", train), ("validation", val)):
        cache = getattr(reader, "cache", None)
        if cache is not None and (spec.verbose >= 2 or (spec.verbose >= 1 and cache.not_kept)):
            print("inmemory_cache_all: rank %d %s data: %s" % (rank, what, cache.summary()), flush=True,
                  file=sys.stdout)


def shard_rows(total_rows: int, rank: int, size: int) -> int:
    """Rows of a rank's contiguous shard, as data/sharding.shard computes it."""
    return (rank + 1) * total_rows // size - rank * total_rows // size


def val_batches(reader, epoch: int, rank: int, size: int, steps: Optional[int]) -> Iterator[dict]:
    """This rank's validation batches. With ``steps`` unset, exactly its shard (the last batch
    cut short, nothing repeated) so that metrics averaged over ranks are the metrics over all
    validation rows. Validation runs no collective per batch, so ranks may differ in batch count."""
    # A reader whose shards are not contiguous row ranges (Petastorm's are whole row groups)
    # tells its own shard's size as `own_rows`.
    own_rows = getattr(reader, "own_rows", None)
    remaining = None if steps is not None else own_rows if own_rows is not None else \
        shard_rows(reader.total_rows, rank, size)
    if remaining == 0:
        return
    with reader.iter_epoch(epoch) as batches:
        for batch in batches:
            if remaining is not None:
                rows = len(next(iter(batch.values())))
                if rows > remaining:
                    batch = {k: v[:remaining] for k, v in batch.items()}
                    rows = remaining
                remaining -= rows
            yield batch
            if remaining == 0:
                return
