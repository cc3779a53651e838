"""``horovod_spark.spark.common.util``: Horovod's path to its data workflow (``horovod.spark.common.util``):
``prepare_data`` (a context manager yielding a dataset index for ``fit_on_parquet(dataset_idx=...)``),
``get_dataset_properties`` and ``clear_training_cache``; the functions are ``horovod_spark.data.dataset_index``'s."""
from horovod_spark.data.dataset_index import clear_training_cache, get_dataset_properties, prepare_data

__all__ = ["prepare_data", "get_dataset_properties", "clear_training_cache"]
