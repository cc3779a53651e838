"""What prepare_data wrote: per-column facts and row counts, stored as metadata.json beside the data.

Kept free of pyspark and pyarrow so that ranks (and a Keras or Torch model builder) can read it.
"""
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

FORMAT_VERSION = 1


@dataclass(frozen=True)
class ColumnInfo:
    """One written column. ``shape`` is per row: () for scalars, (n,) for arrays and vectors."""
    name: str
    role: str                 # "feature", "label" or "sample_weight"
    dtype: str                # numpy dtype name of the values as written
    shape: tuple
    spark_type: str           # the source column's Spark type, e.g. "vector" or "array<float>"
    is_vector: bool = False   # source was a pyspark.ml / mllib Vector (written densified)
    is_sparse: bool = False   # SparseVectors seen in the source (sampled: see validate.scan_data)

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ColumnInfo":
        return cls(**{**d, "shape": tuple(d["shape"])})


@dataclass
class PreparedDataset:
    """Where a prepared dataset lives and what it holds. Paths are store paths."""
    key: str
    train_path: str
    val_path: Optional[str]
    train_rows: int
    val_rows: int
    metadata: Dict[str, ColumnInfo]
    feature_cols: List[str]
    label_cols: List[str]
    sample_weight_col: Optional[str] = None
    reused: bool = field(default=False, compare=False)  # True when an earlier prepare's files were reused

    @property
    def columns(self) -> List[str]:
        return list(self.metadata)


def metadata_to_json(ds: PreparedDataset, extra: Dict[str, Any]) -> bytes:
    doc = {
        "format_version": FORMAT_VERSION,
        "key": ds.key,
        "feature_cols": ds.feature_cols,
        "label_cols": ds.label_cols,
        "sample_weight_col": ds.sample_weight_col,
        "columns": [c.to_json() for c in ds.metadata.values()],
        "train": {"dir": "train", "rows": ds.train_rows},
        "val": {"dir": "val", "rows": ds.val_rows} if ds.val_path is not None else None,
    }
    doc.update(extra)
    return json.dumps(doc, indent=1, sort_keys=True).encode("utf-8")


def load_prepared(store, key: str) -> Optional[PreparedDataset]:
    """The dataset prepared under ``key`` in ``store``, or None when there is no complete one.
    metadata.json is written last, so its presence means the data beside it is complete."""
    path = store.get_data_metadata_path(key)
    if not store.exists(path):
        return None
    doc = json.loads(store.read_bytes(path).decode("utf-8"))
    if doc.get("format_version") != FORMAT_VERSION:
        return None
    columns = [ColumnInfo.from_json(c) for c in doc["columns"]]
    return PreparedDataset(
        key=doc["key"],
        train_path=store.get_train_data_path(key),
        val_path=store.get_val_data_path(key) if doc["val"] is not None else None,
        train_rows=int(doc["train"]["rows"]),
        val_rows=int(doc["val"]["rows"]) if doc["val"] is not None else 0,
        metadata={c.name: c for c in columns},
        feature_cols=list(doc["feature_cols"]),
        label_cols=list(doc["label_cols"]),
        sample_weight_col=doc["sample_weight_col"],
        reused=True,
    )
