"""Spark writes the prepared columns to Parquet in the store: one job for train and validation."""
import math
import posixpath
import uuid
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
from pyspark.sql import DataFrame

from horovod_spark.data.validate import SPLIT_COL

# Under this a file is mostly footer and per-file overhead; above the target the ranks' first
# reads wait long on one file. Between them the input's own partitioning is kept (no shuffle).
MIN_FILE_BYTES = 16 << 20
TARGET_FILE_BYTES = 128 << 20


@dataclass(frozen=True)
class FileInfo:
    name: str
    rows: int
    row_groups: int


def choose_num_files(rows: int, row_bytes: int, num_proc: int, current_partitions: int,
                     num_files: Optional[int]) -> Optional[int]:
    """How many partitions to write, or None to keep the input's partitioning.

    At least ``num_proc`` files so that ranks (or a file-sharding reader) can each take their own,
    rounded up to a multiple of num_proc so file-level shards are even."""
    if num_files is not None:
        return num_files if num_files != current_partitions else None
    total = rows * max(row_bytes, 1)
    wanted = max(num_proc, math.ceil(total / TARGET_FILE_BYTES))
    wanted = math.ceil(wanted / num_proc) * num_proc
    if current_partitions >= wanted and total / current_partitions >= MIN_FILE_BYTES:
        return None
    return wanted


def estimate_row_bytes(dtypes_and_lengths) -> int:
    return sum(np.dtype(dtype).itemsize * max(length, 1) for dtype, length in dtypes_and_lengths)


def write_parquet(store, key: str, out_df: DataFrame, has_split: bool, num_partitions: Optional[int],
                  row_group_bytes: int, compression: str):
    """Write ``out_df`` under the dataset dir as train/ (and val/ when ``has_split``); returns the
    (train, val) file lists. Whatever an interrupted earlier attempt left there is removed first:
    the caller has checked that no complete dataset (metadata.json) exists under this key."""
    data_dir = store.get_data_path(key)
    train_dir, val_dir = store.get_train_data_path(key), store.get_val_data_path(key)
    for directory in (data_dir, train_dir, val_dir):  # the splits are elsewhere under a store's train_path=
        store.delete(directory)
    staging = posixpath.join(data_dir, "_staging-" + uuid.uuid4().hex[:12])
    if num_partitions is not None:
        # repartition, not coalesce: coalesce would also narrow the upstream computation.
        out_df = out_df.repartition(num_partitions)
    # "error", not its synonym "errorifexists", which a Spark Connect client does not know.
    writer = (out_df.write.mode("error")
              .option("compression", compression)
              # parquet-mr closes a row group once its buffered size reaches this many bytes.
              .option("parquet.block.size", str(int(row_group_bytes)))
              # Feature values rarely repeat: parquet-mr would build a dictionary per column chunk,
              # give up on it, and leave dictionary pages that every reader then decodes on top of
              # the plain ones (decoding without them measured 10-25% faster).
              .option("parquet.enable.dictionary", "false"))
    if has_split:
        # One pass over the input writes both splits, so they cannot disagree about rand().
        writer = writer.partitionBy(SPLIT_COL)
    writer.parquet(store.to_spark_path(staging))

    if has_split:
        _move_or_create(store, posixpath.join(staging, SPLIT_COL + "=false"), train_dir)
        _move_or_create(store, posixpath.join(staging, SPLIT_COL + "=true"), val_dir)
        store.delete(staging)
    else:
        store.move(staging, train_dir)
    return parquet_files(store, train_dir), parquet_files(store, val_dir) if has_split else None


def parquet_files(store, directory: str) -> List[FileInfo]:
    """Row counts and row groups per file, from the Parquet footers (no Spark job)."""
    import pyarrow.parquet as pq
    fs = store.filesystem()
    infos = []
    for path in store.list(directory):
        name = posixpath.basename(path)
        if not name.endswith(".parquet") or name.startswith((".", "_")):
            continue
        with fs.open_input_file(store.fs_path(path)) as f:
            meta = pq.ParquetFile(f).metadata
        infos.append(FileInfo(name=name, rows=meta.num_rows, row_groups=meta.num_row_groups))
    return infos


def _move_or_create(store, src: str, dst: str) -> None:
    if store.exists(src):
        store.move(src, dst)
    else:
        store.makedirs(dst)
