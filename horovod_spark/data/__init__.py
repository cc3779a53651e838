"""Data layer: DataFrame -> Parquet in a Store (``prepare_data``) and per-rank readers (``make_reader``).

``prepare_data`` (pyspark) and the torch adapter are imported on first use, so a rank that only
reads batches loads neither Spark nor torch.
"""
from horovod_spark.data.metadata import ColumnInfo, PreparedDataset, load_prepared
from horovod_spark.data.reader import Reader, ReaderStats, data_modules, make_reader, register_data_module

_LAZY = {
    "prepare_data": "horovod_spark.data.prepare",
    "to_torch": "horovod_spark.data.torch_adapter",
    "torch_batches": "horovod_spark.data.torch_adapter",
}

__all__ = ["ColumnInfo", "PreparedDataset", "load_prepared", "Reader", "ReaderStats", "data_modules", "make_reader",
           "register_data_module"] + list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError("module 'horovod_spark.data' has no attribute %r" % name)
