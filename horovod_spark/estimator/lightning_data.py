"""The data a LightningEstimator rank trains on: its shard of the prepared Parquet, read by the
project's reader, as DataLoaders of batch dicts {column name: tensor}; or the user's
LightningDataModule.

The reader already batches, shards by rank and shuffles by (seed, epoch), so the DataLoaders are
thin: an IterableDataset (Lightning adds no DistributedSampler to it) that yields one reader
batch per step, with the epoch taken from the Trainer when an iteration starts.
"""
import inspect
import math
import sys

import numpy as np
import torch

from .common.rank_data import shard_rows, val_batches
from .common.shapes import label_arrays, model_inputs


class BatchTensors:
    """A reader batch (numpy arrays) -> {column: tensor}: features shaped as transform() feeds them
    (input_shapes, scalars as (rows, 1)), labels as stored or by label_shapes, floating columns in
    the module's floating dtype."""

    def __init__(self, spec, float_dtype):
        self.spec, self.float_dtype = spec, float_dtype

    def __call__(self, batch: dict) -> dict:
        spec = self.spec
        out = {}
        for col, values in zip(spec.feature_cols, model_inputs([batch[c] for c in spec.feature_cols],
                                                               spec.input_shapes)):
            out[col] = self._tensor(values)
        for col, values in zip(spec.label_cols, label_arrays([batch[c] for c in spec.label_cols],
                                                             spec.label_shapes)):
            # Integer labels as int64, the class indices torch's losses take.
            out[col] = self._tensor(values, integer_dtype=torch.long)
        if spec.sample_weight_col:
            out[spec.sample_weight_col] = self._tensor(batch[spec.sample_weight_col]).to(self.float_dtype)
        # Columns a transformation_fn added travel too.
        for col, values in batch.items():
            if col not in out:
                out[col] = self._tensor(values)
        return out

    def _tensor(self, values, integer_dtype=None):
        values = np.asarray(values)
        # from_numpy cannot share read-only (Arrow-backed) memory.
        tensor = torch.from_numpy(values if values.flags.writeable else values.copy())
        if tensor.is_floating_point() or tensor.dtype == torch.bool:
            tensor = tensor.to(self.float_dtype)
        elif integer_dtype is not None:
            tensor = tensor.to(integer_dtype)
        return tensor


class EpochBatches(torch.utils.data.IterableDataset):
    """The batches of one epoch of a reader, ``batches(epoch)``, converted by ``convert``; the epoch
    is ``current_epoch()`` when iteration starts. ``len`` is the batches this rank yields."""

    def __init__(self, batches, convert, current_epoch, length: int, describe=None):
        super().__init__()
        self.batches, self.convert, self.current_epoch, self.length = batches, convert, current_epoch, length
        self.describe = describe

    def __len__(self):
        return self.length

    def __iter__(self):
        epoch = self.current_epoch()
        rows = count = 0
        for batch in self.batches(epoch):
            tensors = self.convert(batch)
            count += 1
            rows += len(next(iter(tensors.values()))) if tensors else 0
            yield tensors
        if self.describe is not None:
            self.describe(epoch, count, rows)


def loaders(trainer, spec, rank: int, size: int, float_dtype, debug: bool):
    """(train DataLoader, validation DataLoader or None) over ``trainer``'s readers."""
    convert = BatchTensors(spec, float_dtype)

    def current_epoch():
        return trainer.lightning_trainer.current_epoch

    def describer(what, reader):
        if not debug:
            return None

        def describe(epoch, count, rows):
            print("debug_data_loader: rank %d of %d, %s epoch %d: %d batch(es), %d row(s) of the %d in %s"
                  % (rank, size, what, epoch, count, rows, reader.total_rows, reader.path), file=sys.stdout,
                  flush=True)
        return describe

    def train_batches(epoch):
        with trainer.train_reader.iter_epoch(epoch) as batches:
            yield from batches

    train = EpochBatches(train_batches, convert, current_epoch, trainer.train_reader.steps_per_epoch,
                         describer("training", trainer.train_reader))
    val = None
    reader = trainer.val_reader
    if reader is not None:
        steps = spec.validation_steps_per_epoch
        own = getattr(reader, "own_rows", None)
        length = steps if steps is not None else math.ceil(
            (own if own is not None else shard_rows(reader.total_rows, rank, size)) / spec.val_batch_size)
        val = EpochBatches(lambda epoch: val_batches(reader, epoch, rank, size, steps), convert, current_epoch,
                           length, describer("validation", reader))
    return _loader(train), (_loader(val) if val is not None else None)


def _loader(dataset):
    # The reader batches: the DataLoader hands its batches over as they are, in this process.
    return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)


def build_data_module(data_module, spec, rank: int, size: int, parts: dict):
    """The user's LightningDataModule: an instance as it is, or a class built with the keywords of
    the data it may read (those its constructor takes), under Horovod's names."""
    if not isinstance(data_module, type):
        return data_module
    store = spec.store
    train_queue, val_queue = parts["queue_sizes"]
    offered = {
        "store": store, "train_dir": store.fs_path(store.resolve(spec.train_path)),
        "val_dir": store.fs_path(store.resolve(spec.val_path)) if spec.val_path else None,
        "num_train_epochs": spec.epochs, "has_val": spec.val_path is not None,
        "train_batch_size": spec.batch_size, "val_batch_size": spec.val_batch_size, "shuffle": spec.shuffle,
        "num_reader_epochs": parts["loader_num_epochs"], "transformation": parts["transformation_fn"],
        "inmemory_cache_all": spec.inmemory_cache_all, "cur_shard": rank, "shard_count": size,
        "schema_fields": list(spec.columns), "feature_cols": list(spec.feature_cols),
        "label_cols": list(spec.label_cols), "steps_per_epoch_train": spec.train_steps_per_epoch,
        "steps_per_epoch_val": spec.validation_steps_per_epoch, "verbose": spec.verbose > 0,
        "debug_data_loader": parts["debug_data_loader"], "train_async_data_loader_queue_size": train_queue,
        "val_async_data_loader_queue_size": val_queue, "seed": spec.seed,
    }
    params = inspect.signature(data_module.__init__).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return data_module(**offered)
    return data_module(**{p.name: offered[p.name] for p in params if p.name in offered})
