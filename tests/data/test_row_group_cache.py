"""The Arrow reader's in-memory row-group cache (the estimators' inmemory_cache_all) on real Parquet files:
later epochs read nothing from the files, batches are the same as without the cache, a cache too
small for the data keeps what fits, and cached arrays cannot be written into."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from horovod_spark.data import make_reader
from horovod_spark.data.row_group_cache import RowGroupCache, chunk_bytes
from horovod_spark.store import Store

pytestmark = [pytest.mark.timeout(60), pytest.mark.legacy_stack]


class CountingReader:
    """Counts the row groups an Arrow reader decodes from the files, by wrapping its read method."""

    def __init__(self, reader):
        self.reader, self.reads = reader, []
        read = reader._read_unit

        def counted(unit):
            self.reads.append(unit)
            return read(unit)
        reader._read_unit = counted


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """600 rows in 2 files of row groups of 50 rows: 12 row groups."""
    root = str(tmp_path_factory.mktemp("cache"))
    directory = os.path.join(root, "d")
    os.makedirs(directory)
    for i in range(2):
        ids = np.arange(i * 300, (i + 1) * 300)
        table = pa.table({"id": ids, "x": pa.array(list(np.repeat(ids[:, None], 4, axis=1).astype(np.float32)),
                                                   pa.list_(pa.float32()))})
        pq.write_table(table, os.path.join(directory, "part-%d.parquet" % i), row_group_size=50)
    return Store.create(root), directory


def _reader(data, **kw):
    store, path = data
    return make_reader("arrow", store=store, path=path, batch_size=20, rank=1, num_ranks=2, seed=5, **kw)


def _epochs(reader, epochs):
    """ids per epoch from one iterator over ``epochs`` epochs, as a fit reads them."""
    out = [[] for _ in range(epochs)]
    with reader.iter_batches(0, epochs) as batches:
        for step, batch in enumerate(batches):
            out[step // reader.steps_per_epoch].append(np.array(batch["id"]))
    return [np.concatenate(e) for e in out]


@pytest.mark.parametrize("shuffle", [False, True])
def test_each_row_group_is_read_from_the_files_once_and_batches_do_not_change(data, shuffle):
    plain = CountingReader(_reader(data, shuffle=shuffle))
    cached = CountingReader(_reader(data, shuffle=shuffle, cache_in_memory=True))
    expected, got = _epochs(plain.reader, 3), _epochs(cached.reader, 3)
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)
    assert len(cached.reads) == len(set(cached.reads)), "a row group was decoded twice"
    assert len(plain.reads) > len(cached.reads)
    cache = cached.reader.cache
    assert cache.reads == len(cached.reads) and len(cache) == cache.reads and cache.not_kept == 0
    assert cache.hits == len(plain.reads) - len(cached.reads)
    if not shuffle:
        # The same shard every epoch: epochs 2 and 3 come from memory alone.
        assert len(plain.reads) == 3 * len(cached.reads)


def test_later_epochs_and_iterators_read_nothing_from_the_files(data):
    cached = CountingReader(_reader(data, shuffle=False, cache_in_memory=True))
    first = np.concatenate([b["id"] for b in cached.reader.iter_epoch(0)])
    read_in_first_epoch = list(cached.reads)
    assert read_in_first_epoch
    for epoch in (1, 2):
        again = np.concatenate([b["id"] for b in cached.reader.iter_epoch(epoch)])
        np.testing.assert_array_equal(again, first)
    assert cached.reads == read_in_first_epoch
    assert "0 did not fit" not in cached.reader.cache.summary()


def test_a_cache_too_small_keeps_what_fits_and_the_rest_is_read_again(data):
    one_group = chunk_bytes(_reader(data)._read_unit(0))
    cached = CountingReader(_reader(data, shuffle=False, cache_in_memory=True, cache_max_bytes=2 * one_group))
    expected = _epochs(_reader(data, shuffle=False), 2)
    for a, b in zip(expected, _epochs(cached.reader, 2)):
        np.testing.assert_array_equal(a, b)
    cache = cached.reader.cache
    assert len(cache) == 2 and cache.bytes <= 2 * one_group and cache.not_kept > 0
    assert "did not fit and are read from files each time" in cache.summary()
    assert len(cached.reads) == len(cache) + cache.not_kept


def test_cached_arrays_are_read_only():
    cache = RowGroupCache()
    chunk = cache.get(0, lambda unit: {"x": np.arange(4.0)})
    with pytest.raises(ValueError, match="read-only"):
        chunk["x"][0] = 1.0
    assert cache.get(0, lambda unit: pytest.fail("read again")) is chunk
    assert (cache.reads, cache.hits) == (1, 1)


def test_a_reserve_larger_than_memory_keeps_nothing():
    cache = RowGroupCache(reserve=1 << 62)
    cache.get(0, lambda unit: {"x": np.arange(4.0)})
    assert len(cache) == 0 and cache.not_kept == 1
