"""Horovod's data workflow: ``prepare_data(...)`` as a context manager that writes a DataFrame into the
store as a numbered dataset and yields its index, for ``estimator.fit_on_parquet(dataset_idx=...)``;
``get_dataset_properties(index)`` and ``clear_training_cache()``.

The numbering is Horovod's: a DataFrame prepared again (with the same store and validation) while
its index is known gets the same index; a new one takes the lowest index no ``with`` block is using,
so indices, and the store space behind them, are reused once their blocks end. The data itself is
written by ``horovod_spark.data.prepare.prepare_data``, which also reuses files that hold the same
data (its content key), whatever the index.
"""
import collections
import contextlib
import threading
from typing import Dict, Optional, Sequence, Tuple, Union

from horovod_spark.data.metadata import PreparedDataset

DEFAULT_PARTITIONS_PER_PROCESS = 10


class _Indices:
    """The process's dataset indices: which DataFrame each holds, and which are in use."""

    def __init__(self):
        self.lock = threading.RLock()
        self.clear()

    def clear(self):
        with self.lock:
            self.index_of: Dict[tuple, int] = {}
            self.holder: Dict[int, tuple] = {}
            self.in_use = collections.Counter()
            self.properties: Dict[int, tuple] = {}

    def index_for(self, key: tuple) -> int:
        if key in self.index_of and self.holder.get(self.index_of[key]) == key:
            return self.index_of[key]
        index = 0
        while self.in_use[self.holder.get(index)] > 0:
            index += 1
        self.holder[index], self.index_of[key] = key, index
        return index


_INDICES = _Indices()


@contextlib.contextmanager
def prepare_data(num_processes: int, store, df, label_columns: Sequence[str], feature_columns: Optional[Sequence[str]],
                 validation: Union[None, float, str] = None, sample_weight_col: Optional[str] = None,
                 compress_sparse: bool = False, partitions_per_process: int = DEFAULT_PARTITIONS_PER_PROCESS,
                 verbose: int = 0):
    """Write ``df``'s ``feature_columns`` (None: every column but the labels, the sample weights and
    the validation column) and ``label_columns`` into ``store`` for ``num_processes`` ranks, about
    ``partitions_per_process`` Parquet files each, split by ``validation`` (a fraction, or a column
    whose true rows are validation rows); yields the dataset's index. ``compress_sparse`` is
    accepted: sparse vectors are prepared as fixed-length arrays either way."""
    from horovod_spark.data.prepare import prepare_data as write_dataset
    _check(num_processes, partitions_per_process, label_columns, validation, df)
    label_columns = list(label_columns)
    excluded = set(label_columns) | {sample_weight_col, validation if isinstance(validation, str) else None}
    feature_columns = [c for c in df.columns if c not in excluded] if feature_columns is None else list(feature_columns)
    missing = [c for c in feature_columns if c not in df.columns]
    if missing:
        raise ValueError("feature column(s) %s are not in the DataFrame (its columns: %s)" % (missing, df.columns))
    key = (id(df), repr(store), validation, tuple(feature_columns), tuple(label_columns), sample_weight_col)
    with _INDICES.lock:
        index = _INDICES.index_for(key)
        _INDICES.in_use[key] += 1
    try:
        with _INDICES.lock:  # one write per index at a time, as the index's files are replaced
            prepared = write_dataset(store, df, feature_columns, label_columns, sample_weight_col=sample_weight_col,
                                     validation=validation, num_proc=num_processes,
                                     num_files=num_processes * partitions_per_process, index=index)
            _INDICES.properties[index] = _properties(store, prepared)
        if verbose:
            print("%s dataset %d: train_data_path=%s (%d rows), val_data_path=%s (%d rows)"
                  % ("reusing" if prepared.reused else "prepared", index, prepared.train_path, prepared.train_rows,
                     prepared.val_path, prepared.val_rows))
        yield index
    finally:
        with _INDICES.lock:
            _INDICES.in_use[key] -= 1


def get_dataset_properties(dataset_idx: int) -> Tuple[int, int, dict, int]:
    """``(train_rows, val_rows, metadata, avg_row_size)`` of a dataset ``prepare_data`` wrote in this
    process: metadata maps each column to its ``ColumnInfo``; avg_row_size is in bytes on disk."""
    with _INDICES.lock:
        if dataset_idx not in _INDICES.properties:
            raise KeyError("no dataset %r was prepared in this process: prepare it with prepare_data first (known: %s)"
                           % (dataset_idx, sorted(_INDICES.properties)))
        return _INDICES.properties[dataset_idx]


def clear_training_cache() -> None:
    """Forget every dataset index (the files stay in the store)."""
    _INDICES.clear()


def _check(num_processes, partitions_per_process, label_columns, validation, df) -> None:
    for name, value in (("num_processes", num_processes), ("partitions_per_process", partitions_per_process)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError("prepare_data: %s must be a positive int, got %r" % (name, value))
    if not label_columns or isinstance(label_columns, str):
        raise ValueError("prepare_data: label_columns must be a non-empty list of column names, got %r"
                         % (label_columns,))
    missing = [c for c in label_columns if c not in df.columns]
    if missing:
        raise ValueError("label column(s) %s are not in the DataFrame (its columns: %s)" % (missing, df.columns))
    if isinstance(validation, str) and validation not in df.columns:
        raise ValueError("validation column %r is not in the DataFrame (its columns: %s)" % (validation, df.columns))


def _properties(store, prepared: PreparedDataset) -> tuple:
    from pyarrow import fs as pafs
    files = store.filesystem().get_file_info(pafs.FileSelector(store.fs_path(prepared.train_path)))
    size = sum(f.size or 0 for f in files if f.type == pafs.FileType.File and f.base_name.endswith(".parquet"))
    return (prepared.train_rows, prepared.val_rows, dict(prepared.metadata),
            size // prepared.train_rows if prepared.train_rows else 0)
