"""The Arrow reader's column values: random Parquet files (types, widths, nulls, encodings, every
codec pyarrow writes, page format v1 and v2) read back as the numpy arrays that were written, and
the columns a batch cannot hold refused with the error that names them."""
import os
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from horovod_spark.data import make_reader
from horovod_spark.store import Store

# legacy_stack: scripts/run_tests.sh also runs this module on the older stack (pyspark 3.5, pyarrow 14).
pytestmark = [pytest.mark.timeout(300), pytest.mark.legacy_stack]

_NUMBERS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float32,
            np.float64, np.bool_]
_CODECS = ["none", "snappy", "gzip", "brotli", "lz4", "zstd"]
_LISTS = {"list": pa.list_, "large_list": pa.large_list, "fixed_size_list": None}


def _values(draw, dtype, shape):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        # Few distinct values now and then, so that dictionary pages hold something.
        pool = rng.standard_normal(draw(st.sampled_from([3, 1000]))) * 1e3
        return rng.choice(pool, size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@st.composite
def _columns(draw, rows):
    """(arrow array, expected numpy array or the error it must raise) for one column."""
    dtype = draw(st.sampled_from(_NUMBERS))
    kind = draw(st.sampled_from(["scalar"] + list(_LISTS)))
    width = draw(st.integers(1, 9))
    values = _values(draw, dtype, (rows,) if kind == "scalar" else (rows, width))
    value_type = pa.from_numpy_dtype(dtype)
    fault = draw(st.sampled_from([None] * 9 + ["null", "null element", "ragged"]))
    if kind == "scalar" and fault not in (None, "null"):
        fault = None
    if fault == "ragged" and (kind == "fixed_size_list" or rows < 2):  # one row is never ragged
        fault = None
    element_nullable = draw(st.booleans()) or fault == "null element"
    items = values.tolist()
    if fault == "null":
        items[draw(st.integers(0, rows - 1))] = None
    elif fault == "null element":
        row = draw(st.integers(0, rows - 1))
        items[row] = [None] + items[row][1:]
    elif fault == "ragged":
        row = draw(st.integers(0, rows - 1))
        items[row] = items[row] + items[row][:1] if draw(st.booleans()) or width == 1 else items[row][1:]
    if kind == "scalar":
        array = pa.array(items, value_type)
    else:
        element = pa.field("element", value_type, nullable=element_nullable)
        list_type = pa.list_(element, width) if kind == "fixed_size_list" else _LISTS[kind](element)
        array = pa.array(items, list_type)
    expected = {"null": "has nulls", "null element": "has nulls", "ragged": "rows of different lengths"}.get(
        fault, values)
    return array, expected


@st.composite
def _datasets(draw):
    rows = draw(st.integers(1, 300))
    columns = draw(st.lists(_columns(rows), min_size=1, max_size=4))
    options = {
        "compression": draw(st.sampled_from(_CODECS)),
        "data_page_version": draw(st.sampled_from(["1.0", "2.0"])),
        "use_dictionary": draw(st.booleans()),
        "data_page_size": draw(st.sampled_from([64, 1024, 1 << 20])),
        "row_group_size": draw(st.sampled_from([7, 100, 1000])),
    }
    return rows, columns, options


@settings(max_examples=150, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(_datasets(), st.booleans())
def test_random_files_read_back_as_written(tmp_path_factory, dataset, byte_stream_split):
    rows, columns, options = dataset
    root = tmp_path_factory.mktemp("random")
    names = ["c%d" % i for i in range(len(columns))]
    table = pa.table({name: array for name, (array, _) in zip(names, columns)})
    # A list's values are the leaf "<name>.list.element" (names that match no column are ignored).
    floats = [path for name, (array, _) in zip(names, columns)
              if pa.types.is_floating(getattr(array.type, "value_type", array.type))
              for path in (name, name + ".list.element")]
    if byte_stream_split and floats:
        options = dict(options, use_dictionary=False, use_byte_stream_split=floats)
    os.makedirs(root / "d")
    # Files pyarrow itself cannot write or read back are no test of the reader: pyarrow 14 refuses
    # to write some lists with null components and fails to read back a null fixed-size list it
    # wrote; pyarrow 26 reads a one-row list<bool> column written with page format v2 and 64-byte
    # pages back as no rows.
    try:
        pq.write_table(table, str(root / "d" / "a.parquet"), **options)
        readable = pq.read_table(str(root / "d" / "a.parquet")).equals(table)
    except pa.ArrowException:
        readable = False
    assume(readable)
    reader = make_reader("arrow", store=Store.create(str(root)), path=str(root / "d"), batch_size=rows,
                         shuffle=False)
    errors = [expected for _, expected in columns if isinstance(expected, str)]
    if errors:
        with pytest.raises(ValueError, match="|".join(errors)):
            list(reader.iter_epoch(0))
        return
    (batch,) = list(reader.iter_epoch(0))
    assert list(batch) == names
    for name, (_, expected) in zip(names, columns):
        assert batch[name].dtype == expected.dtype and batch[name].shape == expected.shape, name
        np.testing.assert_array_equal(batch[name], expected, err_msg=str(options))


def test_vectors_arrays_and_numbers_through_shuffled_batches(tmp_path):
    # Several files and row groups, shuffled: every row arrives once, its values intact.
    rng = np.random.default_rng(1)
    os.makedirs(tmp_path / "d")
    start = 0
    for i, n in enumerate([500, 300]):
        ids = np.arange(start, start + n)
        table = pa.table({
            "id": ids,
            "vec": pa.FixedSizeListArray.from_arrays(pa.array((ids[:, None] * 0.5 + np.arange(64)).reshape(-1)
                                                              .astype(np.float32)), 64),
            "doubles": pa.array(list(ids[:, None] + np.arange(3.0)), pa.list_(pa.float64())),
            "label": (ids % 7).astype(np.int32),
        })
        pq.write_table(table, str(tmp_path / "d" / ("part-%d.parquet" % i)), row_group_size=int(rng.integers(50, 200)))
        start += n
    reader = make_reader("arrow", store=Store.create(str(tmp_path)), path=str(tmp_path / "d"), batch_size=40)
    batches = list(reader.iter_epoch(0))
    ids = np.concatenate([b["id"] for b in batches])
    assert sorted(ids) == list(range(800))
    for b in batches:
        assert b["vec"].shape == (40, 64) and b["vec"].dtype == np.float32
        np.testing.assert_array_equal(b["vec"], (b["id"][:, None] * 0.5 + np.arange(64)).astype(np.float32))
        np.testing.assert_array_equal(b["doubles"], b["id"][:, None] + np.arange(3.0))
        np.testing.assert_array_equal(b["label"], b["id"] % 7)


def test_a_file_without_a_read_column_is_named(tmp_path):
    os.makedirs(tmp_path / "d")
    pq.write_table(pa.table({"x": np.arange(10), "y": np.arange(10)}), str(tmp_path / "d" / "a.parquet"))
    pq.write_table(pa.table({"x": np.arange(10)}), str(tmp_path / "d" / "b.parquet"))
    reader = make_reader("arrow", store=Store.create(str(tmp_path)), path=str(tmp_path / "d"), batch_size=5,
                         shuffle=False)
    with pytest.raises(ValueError, match=r"column\(s\) \['y'\] not in .*b\.parquet"):
        list(reader.iter_epoch(0))


def test_reads_through_a_non_local_filesystem():
    # fsspec stores (s3, gcs, abfs, ...) are read through pyarrow's file API.
    pytest.importorskip("fsspec")
    store = Store.create("memory://arc-%s/store" % uuid.uuid4().hex[:8])
    values = np.random.default_rng(2).random((600, 8), dtype=np.float32)
    path = store.fs_path("data")
    store.filesystem().create_dir(path)
    table = pa.table({"features": pa.array(list(values), pa.list_(pa.float32())), "label": np.arange(600)})
    pq.write_table(table, path + "/a.parquet", filesystem=store.filesystem(), row_group_size=200)
    reader = make_reader("arrow", store=store, path="data", batch_size=100, shuffle=False)
    batches = list(reader.iter_epoch(0))
    np.testing.assert_array_equal(np.concatenate([b["features"] for b in batches]), values)
    np.testing.assert_array_equal(np.concatenate([b["label"] for b in batches]), np.arange(600))
