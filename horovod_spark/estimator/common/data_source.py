"""Where a fit's data comes from: a DataFrame (prepared into the store, cached) or Parquet files
already in the store (fit_on_parquet). Each source checks itself without running a Spark job,
then ``prepare`` yields a DataSpec the ranks read."""
import collections
import hashlib
import json
import posixpath
import threading
from dataclasses import dataclass
from typing import Optional

from .checks import FitConfig, check_columns
from .nonfinite import check_finite


@dataclass
class DataSpec:
    train_path: str
    val_path: Optional[str]
    train_rows: int
    val_rows: int
    key: str
    reused: bool


class DataFrameSource:
    def __init__(self, df):
        self.df = df

    def spark_session(self):
        return self.df.sparkSession

    def check(self, cfg: FitConfig) -> None:
        from pyspark.sql import DataFrame

        from horovod_spark.data.schema import inspect_columns
        from horovod_spark.data.validate import check_validation, column_roles
        if not isinstance(self.df, DataFrame):
            raise ValueError("fit() needs a pyspark.sql.DataFrame, got %s" % type(self.df).__name__)
        if self.df.isStreaming:
            raise ValueError("fit() cannot train on a streaming DataFrame: use a batch DataFrame")
        check_columns(cfg, self.df.columns, "the DataFrame")
        # Types (strings, maps, nested arrays...) are rejected here, from the schema alone.
        inspect_columns(self.df.schema, column_roles(cfg.feature_cols, cfg.label_cols, cfg.sample_weight_col),
                        "float32")
        check_validation(self.df, cfg.validation)

    def prepare(self, cfg: FitConfig, num_proc: int, split_seed: int) -> DataSpec:
        from horovod_spark.data import prepare_data
        if cfg.validate_finite:
            check_finite(self.df, cfg.feature_cols + cfg.label_cols, "the DataFrame")
        # Fits running at once (tuning with parallelism > 1) often prepare the same data: one at a
        # time per store, the later ones reuse what the first wrote instead of writing over it.
        with _preparing(cfg.store):
            prepared = prepare_data(cfg.store, self.df, cfg.feature_cols, cfg.label_cols,
                                    sample_weight_col=cfg.sample_weight_col, validation=cfg.validation,
                                    num_proc=num_proc, seed=split_seed, num_files=_num_files(cfg, num_proc))
        return DataSpec(train_path=prepared.train_path, val_path=prepared.val_path, train_rows=prepared.train_rows,
                        val_rows=prepared.val_rows, key=prepared.key, reused=prepared.reused)


class ParquetSource:
    """Parquet already in the store: a directory of files with the selected columns (scalars or
    fixed-length lists), or a dataset directory written by prepare_data (its train/ and val/)."""

    def __init__(self, train_path: str, val_path: Optional[str] = None):
        self.train_path = train_path
        self.val_path = val_path
        self._resolved = None

    def spark_session(self):
        return self._session()

    @staticmethod
    def _session():
        from horovod_spark.exceptions import HorovodSparkError
        from horovod_spark.session import active_session
        try:
            return active_session()
        except HorovodSparkError as exc:
            raise ValueError("fit_on_parquet needs an active SparkSession to run the ranks on: %s" % exc) from None

    def _resolve(self, store):
        train, val = store.resolve(self.train_path), store.resolve(self.val_path) if self.val_path else None
        if store.exists(posixpath.join(train, "metadata.json")) and store.is_dir(posixpath.join(train, "train")):
            doc = json.loads(store.read_bytes(posixpath.join(train, "metadata.json")).decode("utf-8"))
            if val is None and doc.get("val") is not None:
                val = posixpath.join(train, "val")
            train = posixpath.join(train, "train")
        return train, val

    def check(self, cfg: FitConfig) -> None:
        import pyarrow.dataset as ds
        if cfg.validation is not None:
            raise ValueError("fit_on_parquet takes its validation rows as val_path, not the validation param: unset "
                             "validation (est.setValidation(None)) and pass val_path=")
        train, val = self._resolve(cfg.store)
        for what, path in (("train_path", train), ("val_path", val)):
            if path is None:
                continue
            if not cfg.store.is_dir(path):
                raise ValueError("fit_on_parquet: %s %s is not a directory in the store %s" % (what, path, cfg.store))
            schema = ds.dataset(cfg.store.fs_path(path), filesystem=cfg.store.filesystem(), format="parquet").schema
            check_columns(cfg, list(schema.names), "the Parquet files at %s" % path)
        self._resolved = (train, val)

    def prepare(self, cfg: FitConfig, num_proc: int, split_seed: int) -> DataSpec:
        import pyarrow.dataset as ds
        train, val = self._resolved or self._resolve(cfg.store)
        if cfg.validate_finite:
            for path in (p for p in (train, val) if p is not None):
                check_finite(self._session().read.parquet(cfg.store.to_spark_path(path)),
                             cfg.feature_cols + cfg.label_cols, "the Parquet files at %s" % path)
        rows, fingerprint = [], hashlib.sha256()
        for path in (train, val):
            if path is None:
                rows.append(0)
                continue
            dataset = ds.dataset(cfg.store.fs_path(path), filesystem=cfg.store.filesystem(), format="parquet")
            rows.append(dataset.count_rows())
            for name in sorted(dataset.files):
                info = cfg.store.filesystem().get_file_info(name)
                fingerprint.update(("%s:%s:%s;" % (name, info.size, info.mtime_ns)).encode())
        if rows[0] == 0:
            raise ValueError("fit_on_parquet: no rows under %s" % train)
        return DataSpec(train_path=train, val_path=val, train_rows=rows[0], val_rows=rows[1],
                        key="pq-" + fingerprint.hexdigest()[:24], reused=True)


_preparing_locks = collections.defaultdict(threading.Lock)
_preparing_guard = threading.Lock()


def _preparing(store) -> threading.Lock:
    with _preparing_guard:
        return _preparing_locks[store.prefix_path]


def _num_files(cfg: FitConfig, num_proc: int):
    """Horovod's partitions_per_process: the training data's Parquet files per rank (None: by size)."""
    return None if cfg.partitions_per_process is None else cfg.partitions_per_process * num_proc
