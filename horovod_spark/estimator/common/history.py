"""Per-epoch metrics: accumulated on each rank, averaged over ranks, kept as a Keras-style history.

Framework-free (numpy only) so that Torch and Keras ranks share it; the framework only supplies
the allreduce of the vector from ``EpochMetrics.vector()``.
"""
import math
from typing import Dict, List, Optional

import numpy as np


class EpochMetrics:
    """Row-weighted sums of per-batch means: averaging those over all ranks gives the mean over all
    rows seen, whatever the batch sizes. Names must be added in the same order on every rank,
    since the reduced vector is positional."""

    def __init__(self, names: List[str]):
        self.names = list(names)
        self._sums = np.zeros(len(self.names), dtype=np.float64)
        self._weights = np.zeros(len(self.names), dtype=np.float64)

    def add(self, values: Dict[str, float], rows: float) -> None:
        for i, name in enumerate(self.names):
            if name in values:
                self._sums[i] += float(values[name]) * rows
                self._weights[i] += rows

    def vector(self) -> np.ndarray:
        return np.concatenate([self._sums, self._weights])

    def means(self, reduced: Optional[np.ndarray] = None) -> Dict[str, float]:
        """Means from the allreduced (summed) ``vector()``, or from this rank's own sums."""
        v = self.vector() if reduced is None else np.asarray(reduced, dtype=np.float64)
        n = len(self.names)
        sums, weights = v[:n], v[n:]
        return {name: float(sums[i] / weights[i]) if weights[i] > 0 else math.nan
                for i, name in enumerate(self.names)}


class History:
    """{metric name: [value per completed epoch]}, in the order metrics first appeared."""

    def __init__(self, data: Optional[Dict[str, List[float]]] = None):
        self.data: Dict[str, List[float]] = {k: list(v) for k, v in (data or {}).items()}
        self.epochs = max((len(v) for v in self.data.values()), default=0)

    def append(self, logs: Dict[str, float]) -> None:
        for name, value in logs.items():
            self.data.setdefault(name, [math.nan] * self.epochs).append(float(value))
        self.epochs += 1
        for values in self.data.values():
            if len(values) < self.epochs:
                values.append(math.nan)

    def to_dict(self) -> Dict[str, List[float]]:
        return {k: list(v) for k, v in self.data.items()}


def format_epoch(epoch: int, epochs: int, logs: Dict[str, float], seconds: Optional[float] = None) -> str:
    """``epoch 3/10 - loss: 0.1234 - accuracy: 0.9500 - val_loss: ... - 2.1s`` (epoch is 0-based)."""
    parts = ["epoch %d/%d" % (epoch + 1, epochs)]
    parts += ["%s: %.4f" % (name, value) for name, value in logs.items()]
    if seconds is not None:
        parts.append("%.1fs" % seconds)
    return " - ".join(parts)
