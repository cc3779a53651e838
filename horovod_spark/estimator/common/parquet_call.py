"""``fit_on_parquet``'s two forms, told apart by the arguments' types.

Horovod's ``fit_on_parquet(params=None, dataset_idx=None)`` trains on the dataset that
``prepare_data`` wrote as ``dataset_idx`` (``store.get_train_data_path(dataset_idx)``, and its
validation rows where it has some); the earlier form here, ``fit_on_parquet(train_path,
val_path=None, params=None)``, on Parquet files at store paths. A str first argument (a param map
is a dict) or the ``train_path=`` keyword selects the earlier form; anything else is Horovod's.
"""
from .data_source import ParquetSource


class DatasetIndexSource(ParquetSource):
    """The dataset ``prepare_data`` wrote as ``dataset_idx``: its validation rows come from the
    data (the split was made then), so the ``validation`` Param does not apply."""

    def __init__(self, dataset_idx):
        super().__init__(None)
        self.dataset_idx = dataset_idx

    def _resolve(self, store):
        train, val = store.get_train_data_path(self.dataset_idx), store.get_val_data_path(self.dataset_idx)
        if not store.is_dir(train):
            raise ValueError("fit_on_parquet: dataset %r has no training data at %s: prepare it with "
                             "horovod_spark.spark.common.util.prepare_data(...) and pass the index it yields"
                             % (self.dataset_idx, train))
        return train, val if store.is_dir(val) and store.list(val) else None

    def check(self, cfg) -> None:
        super().check(_without_validation(cfg))


def _without_validation(cfg):
    import dataclasses
    return dataclasses.replace(cfg, validation=None)


def parquet_source(params, dataset_idx, more, train_path, val_path):
    """(param map, source) of a ``fit_on_parquet`` call; a TypeError naming both forms for a mix."""
    if isinstance(params, str) or train_path is not None:
        if train_path is not None and isinstance(params, str):
            raise TypeError("fit_on_parquet got train_path twice: as the first argument and as train_path=")
        if isinstance(params, str):
            train_path, params = params, None
            if dataset_idx is not None:
                val_path, dataset_idx = _path(dataset_idx, "val_path"), None
            if more:
                params, more = more[0], more[1:]
        if more or dataset_idx is not None:
            raise TypeError("fit_on_parquet takes (train_path, val_path=None, params=None) or Horovod's "
                            "(params=None, dataset_idx=None), not a mix of both")
        return params, ParquetSource(_path(train_path, "train_path"), _path(val_path, "val_path")
                                     if val_path is not None else None)
    if more or val_path is not None:
        raise TypeError("fit_on_parquet(params=None, dataset_idx=None) takes no more arguments; to train on Parquet "
                        "at store paths call fit_on_parquet(train_path, val_path=None, params=None)")
    if params is not None and not isinstance(params, dict):
        raise TypeError("fit_on_parquet: params must be a param map (dict of Param to value), got %s; a store path "
                        "is a str" % type(params).__name__)
    return params, DatasetIndexSource(dataset_idx)


def _path(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError("fit_on_parquet: %s must be a store path (str), got %r" % (what, value))
    return value
