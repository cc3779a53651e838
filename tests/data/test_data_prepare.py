"""prepare_data against a real local Spark: validation before writing, vectors, splits, the cache."""
import itertools
import json
import os

import numpy as np
import pyarrow.dataset as ds
import pytest

pyspark = pytest.importorskip("pyspark")
from pyspark.ml.functions import array_to_vector  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from horovod_spark.data import load_prepared, make_reader, prepare_data  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

# legacy_stack: scripts/run_tests.sh also runs this module on the older stack (pyspark 3.5, pyarrow 14).
pytestmark = [pytest.mark.timeout(300), pytest.mark.legacy_stack]


@pytest.fixture(scope="module")
def spark_conf():
    return {"spark.sql.shuffle.partitions": "4"}


@pytest.fixture
def store(tmp_path):
    return Store.create(str(tmp_path / "store"))


def _written(store):
    root = store.get_intermediate_data_path()
    return [] if not store.exists(root) else store.list(root)


def _read(path, columns=None):
    return ds.dataset(path, format="parquet").to_table(columns=columns)


_groups = itertools.count()


def _jobs_run(spark, fn):
    """fn's result and the number of Spark jobs it started."""
    sc = spark.sparkContext
    group = "count-%d" % next(_groups)
    sc.setJobGroup(group, "counting jobs")
    try:
        result = fn()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return result, len(sc.statusTracker().getJobIdsForGroup(group))


@pytest.fixture(scope="module")
def good_df(spark):
    return spark.range(40, numPartitions=2).select(
        F.col("id"), F.array(F.col("id").cast("float"), F.lit(1.0).cast("float")).alias("arr"),
        (F.col("id") % 2).cast("double").alias("label"), (F.col("id") % 5 == 0).alias("is_val"),
        (F.col("id") % 4).cast("int").alias("fold"), F.col("id").cast("string").alias("name"),
        F.create_map(F.lit("k"), F.col("id")).alias("m"), F.struct(F.col("id").alias("a")).alias("s"),
        F.when(F.col("id") == 7, None).otherwise(F.col("id")).alias("with_null"),
        F.when(F.col("id") == 3, F.array(F.lit(1.0))).otherwise(F.array(F.lit(1.0), F.lit(2.0))).alias("ragged"),
        (F.col("id") * 1.5).alias("x"),
        F.when(F.col("id") == 9, None).otherwise(array_to_vector(F.array(F.col("id").cast("double"))))
        .alias("vec_null"))


# -- everything wrong raises ValueError before anything is written ------------------------------

BAD_INPUTS = [
    (dict(feature_cols=["nope"], label_cols=["label"]), r"nope.*not in the DataFrame"),
    (dict(feature_cols=["x"], label_cols=["missing_label"]), "missing_label"),
    (dict(feature_cols=["name"], label_cols=["label"]), r"'name'.*string.*StringIndexer"),
    (dict(feature_cols=["m"], label_cols=["label"]), r"'m'.*map"),
    (dict(feature_cols=["s"], label_cols=["label"]), r"'s'.*struct.*fields"),
    (dict(feature_cols=["with_null"], label_cols=["label"]),
     r"null values.*'with_null' \(1 of 40 rows\).*dropna"),
    (dict(feature_cols=["vec_null"], label_cols=["label"]),
     r"null values.*'vec_null' \(1 of 40 rows\).*dropna"),
    (dict(feature_cols=["ragged"], label_cols=["label"]), r"'ragged'.*different lengths \(1 to 2\)"),
    (dict(feature_cols=["x"], label_cols=["label"], validation=0.0), r"validation=0.0.*between 0 and 1"),
    (dict(feature_cols=["x"], label_cols=["label"], validation=1.0), r"between 0 and 1"),
    (dict(feature_cols=["x"], label_cols=["label"], validation=-0.2), r"between 0 and 1"),
    (dict(feature_cols=["x"], label_cols=["label"], validation=1.5), r"between 0 and 1"),
    (dict(feature_cols=["x"], label_cols=["label"], validation="name"),
     r"validation column 'name'.*boolean or integer"),
    (dict(feature_cols=["x"], label_cols=["label"], validation="x"), r"validation column 'x'.*boolean or integer"),
    (dict(feature_cols=["x"], label_cols=["label"], validation="absent"), r"validation column 'absent' is not"),
    (dict(feature_cols=["x"], label_cols=["label"], validation="with_null"), r"'with_null'"),
    (dict(feature_cols=["x"], label_cols=["x"]), r"'x' is selected twice"),
    (dict(feature_cols=[], label_cols=["label"]), "feature_cols is empty"),
    (dict(feature_cols=["x"], label_cols=["label"], sample_weight_col="arr"), r"sample_weight_col 'arr'"),
]


@pytest.mark.parametrize("kwargs,message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_refused_before_writing(spark, good_df, store, kwargs, message):
    with pytest.raises(ValueError, match=message):
        prepare_data(store, good_df, **kwargs)
    assert _written(store) == []


def test_checks_that_need_data_take_one_aggregation_and_no_write(spark, good_df, store):
    def run():
        with pytest.raises(ValueError, match="with_null"):
            prepare_data(store, good_df, ["with_null"], ["label"])
    _, jobs = _jobs_run(spark, run)
    # As many jobs as one plain count (adaptive execution runs a global aggregation as two).
    _, count_jobs = _jobs_run(spark, lambda: good_df.agg(F.count(F.lit(1))).first())
    assert jobs == count_jobs
    assert _written(store) == []


def test_empty_dataframe(spark, good_df, store):
    with pytest.raises(ValueError, match="empty"):
        prepare_data(store, good_df.filter("id < 0"), ["x"], ["label"])
    assert _written(store) == []


def test_validation_column_marking_no_rows(spark, good_df, store):
    with pytest.raises(ValueError, match="selects no rows for validation"):
        prepare_data(store, good_df.withColumn("none", F.lit(False)), ["x"], ["label"], validation="none")
    assert _written(store) == []


# -- what gets written ----------------------------------------------------------------------------

def test_vectors_arrays_and_scalars(spark, store):
    rows = [(i, Vectors.sparse(5, [i % 5], [float(i)]), Vectors.dense([float(i), 0.5, -1.0]), [i, i + 1, i + 2],
             float(i % 2), 0.5 + i) for i in range(30)]
    schema = T.StructType([
        T.StructField("id", T.LongType()), T.StructField("sparse", pyspark.ml.linalg.VectorUDT()),
        T.StructField("dense", pyspark.ml.linalg.VectorUDT()), T.StructField("ints", T.ArrayType(T.IntegerType())),
        T.StructField("label", T.DoubleType()), T.StructField("w", T.DoubleType())])
    df = spark.createDataFrame(rows, schema).repartition(3)
    prepared = prepare_data(store, df, ["id", "sparse", "dense", "ints"], ["label"], sample_weight_col="w", num_proc=2)

    meta = prepared.metadata
    assert (meta["sparse"].dtype, meta["sparse"].shape, meta["sparse"].is_vector, meta["sparse"].is_sparse) == \
        ("float32", (5,), True, True)
    assert (meta["dense"].shape, meta["dense"].is_vector, meta["dense"].is_sparse) == ((3,), True, False)
    assert (meta["ints"].dtype, meta["ints"].shape, meta["ints"].is_vector) == ("int32", (3,), False)
    assert (meta["label"].dtype, meta["label"].shape, meta["label"].role) == ("float64", (), "label")
    assert meta["w"].role == "sample_weight"
    assert prepared.train_rows == 30 and prepared.val_path is None and prepared.val_rows == 0

    table = _read(prepared.train_path).sort_by("id")
    assert table.column_names == ["id", "sparse", "dense", "ints", "label", "w"]
    sparse = np.array(table["sparse"].to_pylist(), dtype=np.float32)
    expected = np.zeros((30, 5), np.float32)
    expected[np.arange(30), np.arange(30) % 5] = np.arange(30)
    np.testing.assert_array_equal(sparse, expected)
    assert table["dense"].type.value_type == "float" and table["ints"].type.value_type == "int32"
    assert table["ints"].to_pylist()[4] == [4, 5, 6]

    doc = json.loads(store.read_bytes(store.get_data_metadata_path(prepared.key)))
    assert doc["train"]["rows"] == 30 and sum(f["rows"] for f in doc["train_files"]) == 30


def test_validation_by_fraction_is_disjoint_complete_and_seeded(spark, good_df, tmp_path):
    def split(seed, where):
        prepared = prepare_data(Store.create(str(tmp_path / where)), good_df, ["x", "arr"], ["label"],
                                validation=0.25, seed=seed)
        train = set(_read(prepared.train_path, ["x"])["x"].to_pylist())
        val = set(_read(prepared.val_path, ["x"])["x"].to_pylist())
        assert (prepared.train_rows, prepared.val_rows) == (len(train), len(val))
        return train, val

    train, val = split(3, "a")
    assert not train & val and len(train | val) == 40 and 0 < len(val) < 40
    assert split(3, "b") == (train, val)        # same seed, another store: same split
    assert split(4, "c") != (train, val)


@pytest.mark.parametrize("column,expected", [("is_val", lambda i: i % 5 == 0), ("fold", lambda i: i % 4 != 0)])
def test_validation_by_column(spark, good_df, store, column, expected):
    prepared = prepare_data(store, good_df, ["id", "x"], ["label"], validation=column)
    val_ids = sorted(_read(prepared.val_path, ["id"])["id"].to_pylist())
    train_ids = sorted(_read(prepared.train_path, ["id"])["id"].to_pylist())
    assert val_ids == [i for i in range(40) if expected(i)]
    assert train_ids == [i for i in range(40) if not expected(i)]
    assert _read(prepared.train_path).column_names == ["id", "x", "label"]  # the split column is not written


# -- the cache -----------------------------------------------------------------------------------

def test_second_prepare_reuses_files_without_any_job(spark, store):
    def build():
        return spark.range(100, numPartitions=2).select(
            "id", (F.col("id") * 0.5).alias("x"), (F.col("id") % 2).alias("y"))

    first, jobs = _jobs_run(spark, lambda: prepare_data(store, build(), ["x"], ["y"], validation=0.2))
    assert jobs >= 2 and not first.reused
    metadata_path = store.get_data_metadata_path(first.key)
    mtime = os.stat(metadata_path).st_mtime_ns
    files = sorted(os.listdir(first.train_path))

    second, jobs = _jobs_run(spark, lambda: prepare_data(store, build(), ["x"], ["y"], validation=0.2))
    assert jobs == 0 and second.reused
    assert second == first
    assert os.stat(metadata_path).st_mtime_ns == mtime and sorted(os.listdir(first.train_path)) == files
    assert load_prepared(store, first.key) == first

    changed_data = prepare_data(store, build().filter("id > 0"), ["x"], ["y"], validation=0.2)
    changed_params = prepare_data(store, build(), ["x"], ["y"], validation=0.3)
    reordered = prepare_data(store, build(), ["x", "id"], ["y"], validation=0.2)
    swapped = prepare_data(store, build(), ["id", "x"], ["y"], validation=0.2)
    assert len({first.key, changed_data.key, changed_params.key, reordered.key, swapped.key}) == 5
    assert swapped.feature_cols == ["id", "x"] and list(swapped.metadata) == ["id", "x", "y"]


def test_dataframes_from_python_data_are_told_apart(spark, store):
    a = prepare_data(store, spark.createDataFrame([(1.0, 0), (2.0, 1)], ["x", "y"]), ["x"], ["y"])
    b = prepare_data(store, spark.createDataFrame([(5.0, 0), (6.0, 1)], ["x", "y"]), ["x"], ["y"])
    assert a.key != b.key
    assert sorted(_read(b.train_path)["x"].to_pylist()) == [5.0, 6.0]


def test_parquet_source_read_twice_shares_a_key(spark, good_df, store, tmp_path):
    source = str(tmp_path / "source")
    good_df.select("x", "label").write.parquet(source)
    first = prepare_data(store, spark.read.parquet(source), ["x"], ["label"])
    second = prepare_data(store, spark.read.parquet(source), ["x"], ["label"])
    assert second.key == first.key and second.reused


# -- files for ranks -------------------------------------------------------------------------------

@pytest.mark.parametrize("partitions,num_proc", [(8, 2), (1, 3)])
def test_files_and_shards_for_more_and_fewer_partitions_than_ranks(spark, store, partitions, num_proc):
    df = spark.range(301, numPartitions=partitions).select("id", F.array(F.col("id").cast("double")).alias("v"))
    prepared = prepare_data(store, df, ["v"], ["id"], num_proc=num_proc, validation=0.1)
    assert len([f for f in os.listdir(prepared.train_path) if f.endswith(".parquet")]) >= num_proc
    seen = []
    for rank in range(num_proc):
        reader = make_reader(store=store, path=prepared.train_path, batch_size=16, rank=rank, num_ranks=num_proc)
        ids = set(np.concatenate([b["id"] for b in reader.iter_epoch(0)]).tolist())
        seen.append(ids)
    assert sum(len(s) for s in seen) == prepared.train_rows
    assert set().union(*seen) == set(_read(prepared.train_path, ["id"])["id"].to_pylist())


def test_row_groups_follow_row_group_bytes(spark, store):
    df = spark.range(20000, numPartitions=1).select(
        F.array(*[(F.col("id") + i).cast("double") for i in range(16)]).alias("v"), F.col("id"))
    prepared = prepare_data(store, df, ["v"], ["id"], row_group_bytes=256 * 1024, compression="none")
    groups = [f.num_row_groups for f in ds.dataset(prepared.train_path, format="parquet").get_fragments()]
    assert sum(groups) >= 8  # ~2.7 MB of doubles in 256 KiB row groups
    doc = json.loads(store.read_bytes(store.get_data_metadata_path(prepared.key)))
    assert sum(f["row_groups"] for f in doc["train_files"]) == sum(groups)


def test_prepared_columns_are_written_without_dictionary_pages(spark, store):
    # Repeating values would get a dictionary by default; prepared data is read many times, so it
    # is written plain (decoding dictionary pages cost 10-25% of a read pass on float features).
    import pyarrow.parquet as pq
    df = spark.range(5000, numPartitions=1).select(
        F.array(*[(F.col("id") % 3 + i).cast("float") for i in range(4)]).alias("v"), (F.col("id") % 2).alias("y"))
    prepared = prepare_data(store, df, ["v"], ["y"])
    fragment = next(iter(ds.dataset(prepared.train_path, format="parquet").get_fragments()))
    meta = pq.ParquetFile(fragment.path).metadata
    for i in range(meta.num_columns):
        column = meta.row_group(0).column(i)
        assert not column.has_dictionary_page and not any("DICTIONARY" in e for e in column.encodings), \
            (column.path_in_schema, column.encodings)


@pytest.mark.parametrize("compression", ["snappy", "none"])
def test_spark_written_vectors_arrays_and_numbers_read_back_as_written(spark, store, compression):
    # Spark's own Parquet writer (parquet-mr) is what the reader meets in practice: every row's
    # vector, arrays and numbers come back with the values and dtypes written.
    df = spark.range(6000, numPartitions=2).select(
        array_to_vector(F.array(*[(F.col("id") * 0.5 + i).cast("double") for i in range(64)])).alias("vec"),
        F.array(*[(F.col("id") + i).cast("double") for i in range(100)]).alias("doubles"),
        F.array(*[(F.col("id") % 7 + i).cast("int") for i in range(3)]).alias("ints"), F.col("id"))
    prepared = prepare_data(store, df, ["vec", "doubles", "ints"], ["id"], num_proc=2, row_group_bytes=512 * 1024,
                            compression=compression)
    groups = [f.num_row_groups for f in ds.dataset(prepared.train_path, format="parquet").get_fragments()]
    assert sum(groups) > 2
    reader = make_reader("arrow", store=store, path=prepared.train_path, batch_size=100, shuffle=False)
    batches = list(reader.iter_epoch(0))
    ids = np.concatenate([b["id"] for b in batches])
    assert sorted(ids) == list(range(6000))
    for b in batches:
        assert [b[name].dtype for name in ("vec", "doubles", "ints", "id")] == [np.float32, np.float64, np.int32,
                                                                               np.int64]
        row_ids = b["id"][:, None]
        np.testing.assert_array_equal(b["vec"], (row_ids * 0.5 + np.arange(64)).astype(np.float32))
        np.testing.assert_array_equal(b["doubles"], row_ids + np.arange(100.0))
        np.testing.assert_array_equal(b["ints"], row_ids % 7 + np.arange(3))
