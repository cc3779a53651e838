"""The reader interface and ``make_reader``: the one place that picks a data module.

"arrow" (pyarrow.dataset) is built in. Other modules (Petastorm, on the older pyarrow < 16 stack
it needs) plug in with ``register_data_module`` and are used by name, so estimators never import
a data module directly.
"""
import importlib
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, Optional, Union

_DATA_MODULES: Dict[str, Union[str, Callable]] = {
    "arrow": "horovod_spark.data.arrow_reader:ArrowReader",
    # Importable on every stack; raises PetastormUnavailableError (which versions work) where
    # Petastorm itself cannot be imported (pyarrow >= 16).
    "petastorm": "horovod_spark.data.petastorm_reader:PetastormReader",
}


@dataclass
class ReaderStats:
    """What consumers took from a reader; cheap enough to keep on while training."""
    rows: int = 0
    batches: int = 0
    wait_seconds: float = 0.0            # consumer time blocked on the reader: a slow-input signal
    started: Optional[float] = None
    last: Optional[float] = None

    def record(self, rows: int, waited: float, asked_at: float) -> None:
        if self.started is None:
            self.started = asked_at
        self.rows += rows
        self.batches += 1
        self.wait_seconds += waited
        self.last = asked_at + waited

    @property
    def seconds(self) -> float:
        return 0.0 if self.started is None else self.last - self.started

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def reset(self) -> None:
        self.__init__()


class Reader:
    """Per-rank batches of a prepared dataset.

    Every rank yields ``steps_per_epoch`` batches per epoch, each a dict of column name ->
    numpy array with ``batch_size`` rows (after ``transformation_fn``, whatever it returns).
    Arrays may be read-only views of the decoded data (always so without shuffling): copy before
    modifying one in place. Iterators read ahead in a background thread; close them (or exhaust
    them, or use ``with``)."""

    total_rows: int
    steps_per_epoch: int
    batch_size: int
    stats: ReaderStats

    def iter_batches(self, start_epoch: int = 0, num_epochs: Optional[int] = None) -> Iterator[dict]:
        """Batches of epochs start_epoch, start_epoch+1, ...; forever when num_epochs is None."""
        raise NotImplementedError

    def iter_epoch(self, epoch: int) -> Iterator[dict]:
        return self.iter_batches(epoch, 1)


def register_data_module(name: str, factory: Union[str, Callable]) -> None:
    """``factory`` is a Reader class/callable, or "module:attr" imported on first use."""
    _DATA_MODULES[name] = factory


def data_modules():
    return sorted(_DATA_MODULES)


def make_reader(data_module: str = "arrow", *, store, path: str, batch_size: int, rank: int = 0,
                num_ranks: int = 1, **options) -> Reader:
    """A reader of the prepared Parquet under ``path`` in ``store`` for ``rank`` of ``num_ranks``.
    ``options`` go to the data module (see ArrowReader for the built-in one's)."""
    if data_module not in _DATA_MODULES:
        raise ValueError("unknown data module %r; available: %s (others plug in with register_data_module; "
                         "Petastorm needs the pyarrow < 16 stack)" % (data_module, data_modules()))
    factory = _DATA_MODULES[data_module]
    if isinstance(factory, str):
        module_name, attr = factory.split(":")
        factory = getattr(importlib.import_module(module_name), attr)
        _DATA_MODULES[data_module] = factory
    return factory(store, path, batch_size=batch_size, rank=rank, num_ranks=num_ranks, **options)
