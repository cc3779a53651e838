"""prepare_data: a Spark DataFrame -> Parquet in a Store, ready for per-rank readers (cached)."""
import datetime
from typing import Optional, Sequence, Union

from pyspark.ml.functions import vector_to_array
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from horovod_spark.data.cache_key import dataset_key
from horovod_spark.data.metadata import ColumnInfo, PreparedDataset, load_prepared, metadata_to_json
from horovod_spark.data.parquet_writer import choose_num_files, estimate_row_bytes, write_parquet
from horovod_spark.data.schema import column, inspect_columns
from horovod_spark.data.validate import SPLIT_COL, check_arguments, check_stats, column_roles, scan_data, split_column
from horovod_spark.store.base import dataset_name

DEFAULT_ROW_GROUP_BYTES = 8 << 20


def prepare_data(store, df: DataFrame, feature_cols: Sequence[str], label_cols: Sequence[str],
                 sample_weight_col: Optional[str] = None, validation: Union[None, float, str] = None,
                 num_proc: int = 1, num_files: Optional[int] = None,
                 row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES, compression: str = "snappy",
                 seed: int = 0, vector_dtype: str = "float32", index: Optional[int] = None) -> PreparedDataset:
    """Write the selected columns of ``df`` to ``store`` for training, or reuse an earlier write.

    validation: None; a fraction in (0, 1) (rows drawn with ``rand(seed)``); or the name of a
    boolean/integer column whose true/nonzero rows form the validation set (not written itself).
    Vector columns become fixed-length ``vector_dtype`` arrays (float32 by default: what models
    train in, and half the bytes); arrays keep their element type; scalars stay scalars.

    Everything that can be wrong with the input raises ValueError before any file is written.
    That costs one aggregation over ``df`` (rows, nulls, lengths: one pass, which adaptive query
    execution runs as two Spark jobs) before the write job; both are skipped when the same data
    was prepared with the same parameters before (same key, see cache_key.py).

    index: store the data as Horovod's dataset ``index`` (``store.get_train_data_path(index)``)
    instead of under its key; reused when that dataset holds the same data, replaced otherwise.
    """
    roles = column_roles(feature_cols, label_cols, sample_weight_col)
    check_arguments(df, validation, num_proc, vector_dtype, row_group_bytes, num_files)
    specs = inspect_columns(df.schema, roles, vector_dtype)
    if validation is not None and not isinstance(validation, str):
        validation = float(validation)

    # A list, not the dict: the key is hashed from sorted JSON, and column order is part of the data.
    params = {"columns": list(roles.items()), "validation": validation,
              "seed": seed if isinstance(validation, float) else None, "vector_dtype": vector_dtype,
              "row_group_bytes": int(row_group_bytes), "compression": compression, "num_files": num_files}
    key = dataset_key(df, params)
    name = key if index is None else dataset_name(index)
    cached = load_prepared(store, name)
    if cached is not None and cached.key == key:
        return cached

    split = split_column(validation, seed)
    scanned = df.withColumn(SPLIT_COL, split) if split is not None else df
    stats = scan_data(scanned, specs, validation if isinstance(validation, str) else None)
    check_stats(stats, specs, validation)

    columns = {}
    selected = []
    for spec in specs:
        length = stats.max_len.get(spec.name)
        columns[spec.name] = ColumnInfo(name=spec.name, role=spec.role, dtype=spec.dtype,
                                        shape=() if length is None else (length,), spark_type=spec.spark_type,
                                        is_vector=spec.kind == "vector", is_sparse=stats.sparse.get(spec.name, False))
        col = vector_to_array(column(spec.name), spec.dtype) if spec.kind == "vector" else column(spec.name)
        selected.append(col.alias(spec.name))
    if split is not None:
        selected.append(F.col(SPLIT_COL))
    out_df = scanned.select(*selected)

    row_bytes = estimate_row_bytes((c.dtype, c.shape[0] if c.shape else 1) for c in columns.values())
    partitions = choose_num_files(stats.rows, row_bytes, num_proc, _input_partitions(out_df), num_files)
    train_files, val_files = write_parquet(store, name, out_df, split is not None, partitions,
                                           row_group_bytes, compression)

    if not train_files or sum(f.rows for f in train_files) == 0 or (val_files is not None and not sum(
            f.rows for f in val_files)):
        # The scan saw both splits non-empty, so the input changed between the two jobs.
        store.delete(store.get_data_path(name))
        raise ValueError("the DataFrame produced different rows in the check and the write jobs (is it "
                         "non-deterministic?), leaving a split empty; cache or checkpoint it before fitting")
    prepared = PreparedDataset(
        key=key, train_path=store.get_train_data_path(name),
        val_path=store.get_val_data_path(name) if split is not None else None,
        train_rows=sum(f.rows for f in train_files), val_rows=sum(f.rows for f in val_files or []),
        metadata=columns, feature_cols=[c for c, r in roles.items() if r == "feature"],
        label_cols=[c for c, r in roles.items() if r == "label"], sample_weight_col=sample_weight_col)
    extra = {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "validation": validation, "seed": seed, "vector_dtype": vector_dtype,
        "row_group_bytes": int(row_group_bytes), "compression": compression,
        "train_files": [f.__dict__ for f in train_files],
        "val_files": [f.__dict__ for f in val_files] if val_files is not None else None,
    }
    # Written last and atomically: its presence is what marks the dataset complete for reuse.
    store.write_bytes_atomic(store.get_data_metadata_path(name), metadata_to_json(prepared, extra))
    return prepared


def _input_partitions(df: DataFrame) -> int:
    """The input's partition count; 0 for a Spark Connect DataFrame, which has no RDD to ask
    (the write then repartitions to the chosen number of files)."""
    from horovod_spark.session import is_connect_dataframe
    return 0 if is_connect_dataframe(df) else df.rdd.getNumPartitions()
