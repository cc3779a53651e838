"""Checks that prepare_data runs before anything is written.

Argument and schema checks run no Spark job. Data checks (row count, nulls, array lengths, the
validation split) are gathered by ``scan_data`` into ONE aggregation job, because they cannot be
answered from the schema and failing after a full write would waste the write.
"""
import numbers
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

from pyspark.ml.functions import vector_to_array
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from horovod_spark.data.schema import ColumnSpec, column, is_integral_or_boolean

SPLIT_COL = "__horovod_spark_is_val__"
_VECTOR_DTYPES = ("float32", "float64")
_SPARSE_SAMPLE_EVERY = 64


def column_roles(feature_cols, label_cols, sample_weight_col) -> Dict[str, str]:
    """Column name -> role, in write order; rejects empty features and duplicate selections."""
    feature_cols = _names(feature_cols, "feature_cols")
    label_cols = _names(label_cols, "label_cols")
    if not feature_cols:
        raise ValueError("feature_cols is empty: name at least one feature column")
    roles: Dict[str, str] = {}
    selected = [(c, "feature") for c in feature_cols] + [(c, "label") for c in label_cols]
    if sample_weight_col is not None:
        selected += [(_names([sample_weight_col], "sample_weight_col")[0], "sample_weight")]
    for name, role in selected:
        if name in roles:
            raise ValueError("column %r is selected twice (as %s and %s): select each column once"
                             % (name, roles[name], role))
        roles[name] = role
    return roles


def check_arguments(df: DataFrame, validation, num_proc: int, vector_dtype: str,
                    row_group_bytes: int, num_files: Optional[int]) -> None:
    if not isinstance(df, DataFrame):
        raise ValueError("prepare_data needs a pyspark.sql.DataFrame, got %s" % type(df).__name__)
    if df.isStreaming:
        raise ValueError("prepare_data cannot write a streaming DataFrame: train on a batch DataFrame")
    if not isinstance(num_proc, numbers.Integral) or num_proc < 1:
        raise ValueError("num_proc must be a positive integer, got %r" % (num_proc,))
    if vector_dtype not in _VECTOR_DTYPES:
        raise ValueError("vector_dtype must be one of %s, got %r" % (_VECTOR_DTYPES, vector_dtype))
    if not isinstance(row_group_bytes, numbers.Integral) or row_group_bytes < 64 * 1024:
        raise ValueError("row_group_bytes must be an integer >= 65536, got %r" % (row_group_bytes,))
    if num_files is not None and (not isinstance(num_files, numbers.Integral) or num_files < 1):
        raise ValueError("num_files must be a positive integer or None, got %r" % (num_files,))
    if SPLIT_COL in df.columns:
        raise ValueError("the DataFrame has a column named %r, which prepare_data reserves: rename it" % SPLIT_COL)
    check_validation(df, validation)


def check_validation(df: DataFrame, validation: Union[None, float, str]) -> None:
    if validation is None:
        return
    if isinstance(validation, str):
        fields = {f.name: f.dataType for f in df.schema.fields}
        if validation not in fields:
            raise ValueError("validation column %r is not in the DataFrame (columns: %s). Pass an existing "
                             "boolean/integer column, or a fraction in (0, 1)." % (validation, df.columns))
        if not is_integral_or_boolean(fields[validation]):
            raise ValueError("validation column %r has type %s: it must be boolean or integer (true/nonzero "
                             "rows go to validation). Cast it, e.g. col(%r).cast('boolean')."
                             % (validation, fields[validation].simpleString(), validation))
        return
    if isinstance(validation, bool) or not isinstance(validation, numbers.Real) or not 0 < validation < 1:
        raise ValueError("validation=%r: pass a fraction strictly between 0 and 1 (e.g. 0.1), the name of a "
                         "boolean/integer column, or None" % (validation,))


def split_column(validation: Union[None, float, str], seed: int):
    """True for validation rows. rand(seed) is deterministic for a given input partitioning."""
    if validation is None:
        return None
    if isinstance(validation, str):
        return column(validation).cast("boolean")
    return F.rand(seed) < F.lit(float(validation))


@dataclass
class DataStats:
    rows: int
    val_rows: int
    nulls: Dict[str, int] = field(default_factory=dict)
    null_elements: Dict[str, bool] = field(default_factory=dict)
    min_len: Dict[str, int] = field(default_factory=dict)
    max_len: Dict[str, int] = field(default_factory=dict)
    sparse: Dict[str, bool] = field(default_factory=dict)


def scan_data(df: DataFrame, specs: List[ColumnSpec], validation_col: Optional[str]) -> DataStats:
    """The one aggregation over the data before writing (one pass; adaptive execution runs it as
    two Spark jobs, map and final): counts rows, nulls, array/vector lengths, sparse vectors
    and validation rows. ``df`` already carries SPLIT_COL when there is a validation split."""
    aggs, names, derived = [F.count(F.lit(1)).alias("rows")], [], []
    has_split = SPLIT_COL in df.columns
    aggs.append(F.sum(F.col(SPLIT_COL).cast("long")).alias("val_rows") if has_split else F.lit(0).alias("val_rows"))
    checked = [(s.name, s) for s in specs]
    if validation_col is not None and validation_col not in {s.name for s in specs}:
        checked.append((validation_col, None))
    for i, (name, spec) in enumerate(checked):
        col = column(name)
        aggs.append(F.sum(col.isNull().cast("long")).alias("n%d" % i))
        if spec is not None and spec.kind == "array":
            aggs += [F.min(F.size(col)).alias("lo%d" % i), F.max(F.size(col)).alias("hi%d" % i)]
            if spec.element_nullable:
                aggs.append(F.max(F.exists(col, lambda x: x.isNull()).cast("int")).alias("e%d" % i))
        elif spec is not None and spec.kind == "vector":
            # vector_to_array fails on a null vector; nulls are counted above and reported by
            # check_stats like any column's.
            size = F.when(col.isNotNull(), F.size(vector_to_array(col)))
            # A vector cast to string reads "(size,[indices],[values])" only when it is sparse. That
            # formats every value, which would cost more than the write, so only every 64th row of
            # each partition (its first row included) is looked at: is_sparse is informational,
            # vectors are written dense either way. (Computed in a projection: Spark refuses
            # non-deterministic expressions inside aggregate functions.)
            sampled = (F.monotonically_increasing_id() % F.lit(_SPARSE_SAMPLE_EVERY)) == F.lit(0)
            derived.append(F.when(sampled, F.substring(col.cast("string"), 1, 1) == F.lit("(")).alias("__sparse%d" % i))
            aggs += [F.min(size).alias("lo%d" % i), F.max(size).alias("hi%d" % i),
                     F.max(F.col("__sparse%d" % i).cast("int")).alias("s%d" % i)]
        names.append(name)
    needed = [name for name, _ in checked] + ([SPLIT_COL] if has_split else [])
    source = df.select(*[column(c) for c in needed], *derived)
    row = source.agg(*aggs).first().asDict()
    stats = DataStats(rows=int(row["rows"]), val_rows=int(row["val_rows"] or 0))
    for i, name in enumerate(names):
        stats.nulls[name] = int(row["n%d" % i] or 0)
        if "lo%d" % i in row:
            stats.min_len[name] = int(row["lo%d" % i] or 0)
            stats.max_len[name] = int(row["hi%d" % i] or 0)
        if "e%d" % i in row:
            stats.null_elements[name] = bool(row["e%d" % i])
        if "s%d" % i in row:
            stats.sparse[name] = bool(row["s%d" % i])
    return stats


def check_stats(stats: DataStats, specs: List[ColumnSpec], validation) -> None:
    """Raise ValueError for data that cannot be written as fixed-shape training rows."""
    if stats.rows == 0:
        raise ValueError("the DataFrame is empty: there is nothing to train on (check filters and joins)")
    with_nulls = {name: n for name, n in stats.nulls.items() if n}
    if with_nulls:
        detail = ", ".join("%r (%d of %d rows)" % (name, n, stats.rows) for name, n in with_nulls.items())
        raise ValueError("null values in column(s) %s: drop them (df.dropna(subset=[...])) or fill them "
                         "(df.fillna(...)) before fitting" % detail)
    for name, has_null in stats.null_elements.items():
        if has_null:
            raise ValueError("array column %r has null elements: replace them (e.g. transform(col, x -> "
                             "coalesce(x, 0))) before fitting" % name)
    for spec in specs:
        if spec.name in stats.min_len and stats.min_len[spec.name] != stats.max_len[spec.name]:
            raise ValueError("%s column %r has rows of different lengths (%d to %d): every row must have the same "
                             "length; pad or truncate it (e.g. slice/concat) or filter the odd rows"
                             % (spec.kind, spec.name, stats.min_len[spec.name], stats.max_len[spec.name]))
    if validation is not None:
        what = ("validation column %r" % validation) if isinstance(validation, str) else "validation=%r" % validation
        if stats.val_rows == 0:
            raise ValueError("%s selects no rows for validation out of %d: use a larger fraction, or mark some rows "
                             "true/nonzero" % (what, stats.rows))
        if stats.val_rows == stats.rows:
            raise ValueError("%s selects all %d rows for validation, leaving none to train on" % (what, stats.rows))


def _names(cols, what: str) -> List[str]:
    if cols is None:
        return []
    if isinstance(cols, str):
        cols = [cols]
    cols = list(cols)
    bad = [c for c in cols if not isinstance(c, str) or not c]
    if bad:
        raise ValueError("%s must be column names (strings), got %r" % (what, bad))
    return cols
