"""``ElasticSampler``: Horovod's sampler for elastic jobs, which shards a dataset's indices over the
ranks and, after a reset, shards only the samples the epoch has not processed yet over the new ranks.

::

    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)

    @hvd.elastic.run
    def train(state):
        while state.epoch < epochs:
            for batch_idx, batch in enumerate(loader):
                if batch_idx % 10 == 0:
                    state.commit()
                ...  # the training step
                sampler.record_batch(batch_idx, 32)
            state.epoch += 1
            sampler.set_epoch(state.epoch)
            state.commit()

The shards are the rank-strided slices of the epoch's order (shuffled by ``seed + epoch``, the
same on every rank) less the processed indices, padded with their own first indices to a multiple
of the number of ranks, so every rank gets the same number of samples (and of batches: the ranks'
collectives stay in step). Padding repeats at most ``size - 1`` samples per sharding, only when
the remaining samples do not divide evenly.
"""
import math
from typing import Iterable, List

import torch

from horovod_spark.common import basics


def epoch_order(length: int, shuffle: bool, seed: int, epoch: int) -> List[int]:
    """The order of a dataset's indices in ``epoch``: the same on every rank."""
    if not shuffle:
        return list(range(length))
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(length, generator=generator).tolist()


def shard(remaining: List[int], size: int, rank: int) -> List[int]:
    """``rank``'s share of ``remaining`` among ``size`` ranks: every ``size``-th index from ``rank``,
    after ``remaining`` is padded (cyclically, with its own first indices) to a multiple of ``size``."""
    if not remaining:
        return []
    total = math.ceil(len(remaining) / size) * size
    padded = (remaining * math.ceil(total / len(remaining)))[:total]
    return padded[rank:total:size]


class ElasticSampler(torch.utils.data.Sampler):
    """Samples ``dataset``'s indices for this rank (``hvd.rank()`` of ``hvd.size()``), skipping those
    recorded as processed in this epoch. Make it after ``hvd.init()``. Give it to a ``TorchState``
    (any keyword: ``TorchState(model, optimizer, sampler=sampler)``) so a reset rolls it back to the
    last commit and re-shards the rest of the epoch over the new ranks.

    ``record_batch(batch_idx, batch_size)`` marks a batch of the current shard as processed, on
    every rank's shard at once: in synchronous training all ranks finish batch ``batch_idx``
    together, so a lost rank's share of the committed batches is not done again.
    ``record_indices`` marks given indices, on this rank only; a reset first joins every rank's.
    """

    def __init__(self, dataset, shuffle: bool = True, seed: int = 0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``: its own order, and nothing processed yet."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Mark batch ``batch_idx`` (of ``batch_size`` samples) of every rank's shard as processed."""
        start = batch_idx * batch_size
        for rank in range(self.num_replicas):
            self.processed_indices.update(self._shards[rank][start:start + batch_size])

    def record_indices(self, indices: Iterable[int]) -> None:
        """Mark ``indices`` (dataset indices) as processed."""
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx: int, batch_size: int) -> List[int]:
        """The dataset indices of batch ``batch_idx`` of this rank's shard."""
        start = batch_idx * batch_size
        return self.indices[start:start + batch_size]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict: dict) -> None:
        """Take ``state_dict``'s epoch and processed indices and shard the rest over the ranks now."""
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self) -> None:
        """Shard the epoch's unprocessed indices over the current ranks."""
        self.num_replicas, self.rank = basics.size(), basics.rank()
        processed = self.processed_indices
        order = epoch_order(len(self.dataset), self.shuffle, self.seed, self.epoch)
        self.remaining_indices = [i for i in order if i not in processed]
        self._shards = [shard(self.remaining_indices, self.num_replicas, r) for r in range(self.num_replicas)]
        self.indices = self._shards[self.rank]
        self.num_samples = len(self.indices)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self) -> int:
        return self.num_samples
