"""Which rows each rank reads in an epoch: pure functions of (row groups, seed, epoch, rank).

Every rank computes the same global order of row groups for an epoch, lays their rows end to end,
and takes the contiguous range [rank*T/R, (rank+1)*T/R). Shards are therefore disjoint, cover all
T rows, and differ in size by at most one row whatever the file and row-group sizes; a row group
that straddles two ranks' ranges is read by both, each keeping its part. A rank then pads its
shard to the common per-epoch quota by wrapping around it, so all ranks run the same number of
steps and none waits for another at the end of an epoch.
"""
import math
from dataclasses import dataclass
from typing import List, Sequence

import numpy as np


@dataclass(frozen=True)
class Slice:
    """Rows [start, stop) of row group ``unit`` (an index into the dataset's row-group list)."""
    unit: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


def default_steps_per_epoch(total_rows: int, num_ranks: int, batch_size: int) -> int:
    """Enough full batches for every rank to see its whole shard once (ceil, so no row is skipped)."""
    return max(1, math.ceil(total_rows / (num_ranks * batch_size)))


def epoch_order(num_units: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        return np.arange(num_units)
    return np.random.default_rng([seed, epoch]).permutation(num_units)


def shard(unit_rows: Sequence[int], order: Sequence[int], rank: int, num_ranks: int) -> List[Slice]:
    """This rank's contiguous share of the rows, in ``order``."""
    total = int(sum(unit_rows))
    lo, hi = rank * total // num_ranks, (rank + 1) * total // num_ranks
    slices, offset = [], 0
    for unit in order:
        n = int(unit_rows[unit])
        start, stop = max(lo, offset), min(hi, offset + n)
        if start < stop:
            slices.append(Slice(int(unit), start - offset, stop - offset))
        offset += n
        if offset >= hi:
            break
    return slices


def epoch_plan(unit_rows: Sequence[int], order: Sequence[int], rank: int, num_ranks: int,
               quota_rows: int) -> List[Slice]:
    """Exactly ``quota_rows`` rows: the shard, cut short or wrapped around as needed. A rank whose
    shard is empty (fewer rows than ranks) wraps around the whole dataset instead."""
    own = shard(unit_rows, order, rank, num_ranks)
    source = own or [Slice(int(u), 0, int(unit_rows[u])) for u in order if unit_rows[u]]
    if not source:
        raise ValueError("the dataset has no rows")
    plan: List[Slice] = []
    needed = quota_rows
    while needed > 0:
        for piece in source:
            if needed <= 0:
                break
            take = min(piece.rows, needed)
            plan.append(Slice(piece.unit, piece.start, piece.start + take))
            needed -= take
    return plan

