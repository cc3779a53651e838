"""The fixed-width column fast path (arrays and numbers) against pyarrow's own decoding of the same
Parquet files: identical arrays where it applies, a refusal (and pyarrow's path, with its errors)
where not."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from horovod_spark.data import make_reader
from horovod_spark.data.arrow_reader import table_to_numpy
from horovod_spark.data.fixed_width_columns import ColumnPlan, levels_are_fixed_width, read_column
from horovod_spark.data.thrift_compact import ThriftError, read_struct
from horovod_spark.store import Store

# legacy_stack: scripts/run_tests.sh also runs this module on the older stack (pyspark 3.5, pyarrow 14).
pytestmark = [pytest.mark.timeout(120), pytest.mark.legacy_stack]


def _units(path):
    fragments = sorted(ds.dataset(path, format="parquet").get_fragments(), key=lambda f: f.path)
    return [unit for fragment in fragments for unit in fragment.split_by_row_group()]


def _fast(unit, name="features"):
    plan = ColumnPlan.of(unit.metadata, unit.physical_schema, name)
    return read_column(unit, plan) if plan is not None else None


def _fast_and_expected(path, name="features"):
    """(fast path's array or None, pyarrow's array) for every row group of ``path``."""
    return [(_fast(unit, name), table_to_numpy(unit.to_table(columns=[name]), [name])[name]) for unit in _units(path)]


def _list_table(values: np.ndarray, element_nullable=True):
    rows, width = values.shape
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    array = pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1)))
    if not element_nullable:
        array = array.cast(pa.list_(pa.field("element", array.type.value_type, nullable=False)))
    return pa.table({"features": array, "label": np.arange(rows, dtype=np.int64)})


@pytest.mark.parametrize("compression", ["snappy", "none", "zstd", "gzip"])
@pytest.mark.parametrize("page_version", ["1.0", "2.0"])
def test_matches_pyarrow_across_codecs_and_page_versions(tmp_path, compression, page_version):
    values = np.random.default_rng(0).random((3000, 64), dtype=np.float32)
    pq.write_table(_list_table(values), str(tmp_path / "a.parquet"), compression=compression, use_dictionary=False,
                   data_page_version=page_version, data_page_size=16 * 1024, row_group_size=1100)
    results = _fast_and_expected(str(tmp_path))
    assert len(results) == 3
    for fast, expected in results:
        assert fast is not None, "the fast path refused a plain fixed-width list column"
        assert fast.dtype == np.float32 and fast.flags.writeable and fast.flags.c_contiguous
        np.testing.assert_array_equal(fast, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("width", [1, 3, 8, 13, 64, 100])
@pytest.mark.parametrize("element_nullable", [True, False])
def test_matches_pyarrow_across_dtypes_and_widths(tmp_path, dtype, width, element_nullable):
    values = (np.random.default_rng(width).random((2000, width)) * 1000).astype(dtype)
    pq.write_table(_list_table(values, element_nullable), str(tmp_path / "a.parquet"), use_dictionary=False,
                   data_page_size=8 * 1024, row_group_size=700)
    for fast, expected in _fast_and_expected(str(tmp_path)):
        assert fast is not None
        assert fast.dtype == dtype and fast.shape == expected.shape
        np.testing.assert_array_equal(fast, expected)


def _write_lists(tmp_path, rows, value_type=pa.float32(), **kwargs):
    kwargs.setdefault("use_dictionary", False)
    table = pa.table({"features": pa.array(rows, pa.list_(value_type))})
    pq.write_table(table, str(tmp_path / "a.parquet"), **kwargs)
    return str(tmp_path)


@pytest.mark.parametrize("case, rows", [
    ("null element", [[1.0, 2.0], [None, 4.0]] * 50),
    ("null row", [[1.0, 2.0], None] * 50),
    ("empty row", [[1.0, 2.0], []] * 50),
    ("different lengths, same total", [[1.0] * 63, [2.0] * 65] * 50),
    ("one short row in the middle", [[1.0] * 8] * 60 + [[1.0] * 7, [1.0] * 9] + [[1.0] * 8] * 60),
])
def test_declines_lists_that_are_not_fixed_width(tmp_path, case, rows):
    path = _write_lists(tmp_path, rows)
    for unit in _units(path):
        assert _fast(unit) is None, case


@pytest.mark.parametrize("case, kwargs, value_type", [
    ("dictionary pages", {"use_dictionary": True}, pa.float32()),
    ("byte stream split", {"use_byte_stream_split": True}, pa.float32()),
    ("int8 values (INT32 with a logical type)", {}, pa.int8()),
])
def test_declines_encodings_and_types_it_does_not_decode(tmp_path, case, kwargs, value_type):
    path = _write_lists(tmp_path, [[1, 2, 3, 4]] * 100, value_type, **kwargs)
    for fast, expected in _fast_and_expected(path):
        assert fast is None, case
        assert expected.shape == (100, 4)


def test_nested_and_missing_columns_get_no_plan(tmp_path):
    table = pa.table({"nested": pa.array([[[1.0], [2.0]]] * 10, pa.list_(pa.list_(pa.float32()))),
                      "struct": pa.array([{"a": 1.0}] * 10)})
    pq.write_table(table, str(tmp_path / "a.parquet"))
    unit = _units(str(tmp_path))[0]
    for name in ("nested", "struct", "missing"):
        assert ColumnPlan.of(unit.metadata, unit.physical_schema, name) is None, name


@pytest.mark.parametrize("compression", ["snappy", "none"])
@pytest.mark.parametrize("page_version", ["1.0", "2.0"])
def test_scalar_columns_match_pyarrow(tmp_path, compression, page_version):
    rng = np.random.default_rng(3)
    table = pa.table({"f32": rng.random(5000, dtype=np.float32), "f64": rng.random(5000),
                      "i32": rng.integers(-9, 9, 5000).astype(np.int32), "i64": rng.integers(0, 2**40, 5000)})
    pq.write_table(table, str(tmp_path / "a.parquet"), compression=compression, use_dictionary=False,
                   data_page_version=page_version, data_page_size=4096, row_group_size=2000)
    for name in table.column_names:
        results = _fast_and_expected(str(tmp_path), name)
        assert len(results) == 3
        for fast, expected in results:
            assert fast is not None and fast.shape == expected.shape == (len(expected),), name
            assert fast.dtype == expected.dtype and fast.flags.writeable
            np.testing.assert_array_equal(fast, expected)


def test_scalar_columns_it_does_not_decode(tmp_path):
    import datetime
    table = pa.table({
        "with_nulls": pa.array([1.0, None] * 50),
        "int8": pa.array(np.arange(100, dtype=np.int8)),
        "date": pa.array([datetime.date(2026, 1, 1)] * 100),
        "flag": pa.array([True, False] * 50),
        "text": pa.array(["a"] * 100),
    })
    pq.write_table(table, str(tmp_path / "a.parquet"), use_dictionary=False)
    unit = _units(str(tmp_path))[0]
    assert _fast(unit, "with_nulls") is None  # a plan, but the values do not fill the slots
    for name in ("int8", "date", "flag", "text"):
        assert ColumnPlan.of(unit.metadata, unit.physical_schema, name) is None, name


def test_reader_gives_the_same_batches_and_errors_on_either_path(tmp_path):
    # Fixed width: the fast path; ragged: pyarrow's path and its error, named as before.
    good = np.random.default_rng(1).random((500, 16), dtype=np.float32)
    os.makedirs(tmp_path / "good")
    pq.write_table(_list_table(good), str(tmp_path / "good" / "a.parquet"), use_dictionary=False, row_group_size=128)
    reader = make_reader("arrow", store=Store.create(str(tmp_path)), path=str(tmp_path / "good"), batch_size=50,
                         shuffle=False)
    batches = list(reader.iter_epoch(0))
    np.testing.assert_array_equal(np.concatenate([b["features"] for b in batches]), good)
    np.testing.assert_array_equal(np.concatenate([b["label"] for b in batches]), np.arange(500))

    os.makedirs(tmp_path / "ragged")
    _write_lists(tmp_path / "ragged", [[1.0] * 3, [1.0] * 5] * 20)
    reader = make_reader("arrow", store=Store.create(str(tmp_path)), path=str(tmp_path / "ragged"), batch_size=8)
    with pytest.raises(ValueError, match="rows of different lengths"):
        list(reader.iter_epoch(0))


# -- the repetition-level check on hand-made streams -----------------------------------------------

def _bitpacked(bits):
    """One bit-packed run holding ``bits`` (padded to a multiple of 8)."""
    bits = list(bits) + [0] * (-len(bits) % 8)
    packed = np.packbits(np.array(bits, dtype=np.uint8), bitorder="little").tobytes()
    return _uvarint((len(packed) << 1) | 1) + packed


def _rle(value, count):
    return _uvarint(count << 1) + bytes([value])


def _uvarint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _row_64():
    """How parquet-mr writes a 64-value row: one bit-packed group, then a run of 56 ones."""
    return _bitpacked([0] + [1] * 7) + _rle(1, 56)


def test_levels_accept_fixed_width_rows():
    assert levels_are_fixed_width(_row_64() * 500, 500 * 64, 64)
    assert levels_are_fixed_width(_bitpacked([0, 1, 1, 1] * 3), 12, 4)
    assert levels_are_fixed_width(_rle(0, 1000), 1000, 1)
    # A page that starts and ends inside rows (values 40 to 200 of rows of 64).
    assert levels_are_fixed_width(_rle(1, 24) + _row_64() * 2 + _bitpacked([0] + [1] * 7), 160, 64, start=40)
    assert not levels_are_fixed_width(_rle(1, 24) + _row_64() * 2 + _bitpacked([0] + [1] * 7), 160, 64, start=41)
    assert levels_are_fixed_width(_bitpacked([0, 1, 1] * 168) * 10, 5040, 3)


def test_levels_refuse_anything_else():
    assert not levels_are_fixed_width(_row_64() * 500, 500 * 64, 32)  # another width
    assert not levels_are_fixed_width(_row_64() * 499, 500 * 64, 64)  # too few rows
    assert not levels_are_fixed_width(_bitpacked([0, 1, 1, 0, 1, 1, 1, 1]), 8, 4)
    assert not levels_are_fixed_width(_rle(0, 2) + _rle(1, 6), 8, 4)  # an empty row
    assert not levels_are_fixed_width(_rle(2, 4), 4, 4)  # not a repetition level of a flat list
    assert not levels_are_fixed_width(_row_64()[:-1], 64, 64)  # truncated
    assert not levels_are_fixed_width(b"", 4, 4)


@pytest.mark.parametrize("bad_row", [0, 1, 137, 498, 499])
def test_levels_find_one_odd_row_among_repeats(bad_row):
    # Rows of 63 and 65 at bad_row, bad_row + 1: same total, the bytes repeat around them, so the
    # check must notice the repeats stop and decode what follows.
    rows = [_row_64()] * 500
    rows[bad_row] = _bitpacked([0] + [1] * 7) + _rle(1, 55)
    if bad_row + 1 < 500:
        rows[bad_row + 1] = _bitpacked([0] + [1] * 7) + _rle(1, 57)
    assert not levels_are_fixed_width(b"".join(rows), 500 * 64, 64)


# -- Thrift page headers -----------------------------------------------------------------------------

def test_page_headers_parse_and_garbage_is_refused(tmp_path):
    values = np.ones((100, 4), np.float32)
    pq.write_table(_list_table(values), str(tmp_path / "a.parquet"), use_dictionary=False, compression="none")
    meta = pq.ParquetFile(str(tmp_path / "a.parquet")).metadata
    chunk = meta.row_group(0).column(0)
    with open(str(tmp_path / "a.parquet"), "rb") as f:
        f.seek(chunk.data_page_offset)
        raw = f.read(chunk.total_compressed_size)
    header, body = read_struct(raw)
    assert header[1] == 0 and header[5][1] == 400 and header[2] == header[3] > 1600 and body < 64

    rng = np.random.default_rng(0)
    for _ in range(2000):
        junk = rng.integers(0, 256, rng.integers(0, 64)).astype(np.uint8).tobytes()
        try:
            read_struct(junk)
        except ThriftError:
            pass
    with pytest.raises(ThriftError):
        read_struct(raw[:5])


def test_fast_path_reads_through_a_non_local_filesystem():
    # fsspec stores (s3, gcs, abfs, ...) reach the fast path through pyarrow's file API, not os.preadv.
    import uuid
    pytest.importorskip("fsspec")
    store = Store.create("memory://fwl-%s/store" % uuid.uuid4().hex[:8])
    values = np.random.default_rng(2).random((600, 8), dtype=np.float32)
    path = store.fs_path("data")
    store.filesystem().create_dir(path)
    pq.write_table(_list_table(values), path + "/a.parquet", filesystem=store.filesystem(), use_dictionary=False,
                   row_group_size=200)
    units = [u for f in ds.dataset(path, filesystem=store.filesystem(), format="parquet").get_fragments()
             for u in f.split_by_row_group()]
    assert len(units) == 3 and all(_fast(u) is not None for u in units)
    reader = make_reader("arrow", store=store, path="data", batch_size=100, shuffle=False)
    np.testing.assert_array_equal(np.concatenate([b["features"] for b in reader.iter_epoch(0)]), values)


def test_a_corrupt_page_header_gives_pyarrow_the_row_group_or_the_same_values(tmp_path):
    # One flipped byte anywhere in the column chunk's page headers: the fast path may decline, but
    # must neither raise nor return values other than those written.
    values = np.random.default_rng(4).random((400, 8), dtype=np.float32)
    clean = str(tmp_path / "clean.parquet")
    pq.write_table(_list_table(values), clean, use_dictionary=False, compression="none", data_page_size=4096)
    chunk = pq.ParquetFile(clean).metadata.row_group(0).column(0)
    raw = open(clean, "rb").read()
    start = chunk.data_page_offset
    headers = []  # offsets of page header bytes: walk the pages
    pos = start
    while pos < start + chunk.total_compressed_size:
        header, body = read_struct(raw, pos)
        headers.extend(range(pos, body))
        pos = body + header[3]
    rng = np.random.default_rng(5)
    declined = 0
    for trial, offset in enumerate(rng.choice(headers, size=min(200, len(headers)), replace=False)):
        broken = bytearray(raw)
        broken[offset] ^= int(rng.integers(1, 256))
        directory = tmp_path / ("t%d" % trial)
        os.makedirs(directory)
        with open(str(directory / "a.parquet"), "wb") as f:
            f.write(broken)
        (unit,) = _units(str(directory))
        fast = _fast(unit)
        if fast is None:
            declined += 1
        else:
            np.testing.assert_array_equal(fast, values)
    assert declined > 0
