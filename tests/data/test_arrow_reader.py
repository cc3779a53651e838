"""The Arrow reader on real Parquet files: shards, shuffling, equal steps, the background thread."""
import gc
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import REPO_ROOT

from horovod_spark.data import make_reader
from horovod_spark.data.reader import register_data_module
from horovod_spark.data.shuffle_buffer import ShuffleBuffer
from horovod_spark.store import Store

# legacy_stack: scripts/run_tests.sh also runs this module on the older stack (pyspark 3.5, pyarrow 14).
pytestmark = [pytest.mark.timeout(60), pytest.mark.legacy_stack]

ROWS = 1000


def _write(directory, file_rows, row_group_rows):
    """Files of the shape prepare_data writes: an id, a fixed-length float array, a scalar label."""
    os.makedirs(directory, exist_ok=True)
    start = 0
    for i, n in enumerate(file_rows):
        ids = np.arange(start, start + n)
        table = pa.table({
            "id": ids,
            "features": pa.array(list(np.repeat(ids[:, None], 4, axis=1).astype(np.float32)), pa.list_(pa.float32())),
            "label": (ids % 3).astype(np.int32),
        })
        pq.write_table(table, os.path.join(directory, "part-%05d.parquet" % i), row_group_size=row_group_rows)
        start += n
    return start


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """1000 rows in 3 uneven files with uneven row groups."""
    root = str(tmp_path_factory.mktemp("reader"))
    _write(os.path.join(root, "d"), [450, 330, 220], 70)
    return Store.create(root), os.path.join(root, "d")


def _reader(data, **kw):
    store, path = data
    kw.setdefault("batch_size", 32)
    return make_reader("arrow", store=store, path=path, **kw)


def _epoch_ids(reader, epoch):
    return np.concatenate([b["id"] for b in reader.iter_epoch(epoch)])


def _no_reader_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("hs-reader")]


@pytest.mark.parametrize("num_ranks", [1, 2, 3, 7])
@pytest.mark.parametrize("shuffle", [True, False])
def test_ranks_are_disjoint_and_cover_every_row_each_epoch(data, num_ranks, shuffle):
    for epoch in (0, 1):
        shards = []
        for rank in range(num_ranks):
            ids = _epoch_ids(_reader(data, rank=rank, num_ranks=num_ranks, shuffle=shuffle), epoch)
            shards.append(set(ids.tolist()))
        assert set().union(*shards) == set(range(ROWS))
        assert sum(len(s) for s in shards) == ROWS  # no row in two shards


@pytest.mark.parametrize("num_ranks,batch_size", [(3, 32), (7, 10), (2, 1000)])
def test_every_rank_runs_the_same_number_of_full_batches(data, num_ranks, batch_size):
    expected_steps = -(-ROWS // (num_ranks * batch_size))
    for rank in range(num_ranks):
        reader = _reader(data, rank=rank, num_ranks=num_ranks, batch_size=batch_size)
        assert reader.steps_per_epoch == expected_steps
        sizes = [len(b["id"]) for b in reader.iter_epoch(0)]
        assert sizes == [batch_size] * expected_steps


def test_ranks_short_of_rows_wrap_around_their_own_shard(data):
    # 1000 rows over 3 ranks: shards of 333/333/334 rows, padded to 11 * 32 = 352.
    reader = _reader(data, rank=0, num_ranks=3, shuffle=False)
    ids = _epoch_ids(reader, 0)
    assert len(ids) == 352
    assert ids[:333].tolist() == list(range(333))
    assert ids[333:].tolist() == list(range(19))


def test_more_ranks_than_rows(tmp_path):
    _write(str(tmp_path / "d"), [2], 1)
    store = Store.create(str(tmp_path))
    got = [_epoch_ids(make_reader("arrow", store=store, path=str(tmp_path / "d"), batch_size=2, rank=r, num_ranks=3), 0)
           for r in range(3)]
    assert all(len(ids) == 2 for ids in got)
    assert set(np.concatenate(got).tolist()) == {0, 1}


def test_order_changes_every_epoch_and_repeats_for_the_same_seed(data):
    first = _epoch_ids(_reader(data, seed=5), 0)
    again = _epoch_ids(_reader(data, seed=5), 0)
    second_epoch = _epoch_ids(_reader(data, seed=5), 1)
    other_seed = _epoch_ids(_reader(data, seed=6), 0)
    assert first.tolist() == again.tolist()
    assert first.tolist() != second_epoch.tolist()
    assert first.tolist() != other_seed.tolist()
    assert sorted(first[:32].tolist()) != first[:32].tolist()  # rows shuffled, not just row groups


def test_a_larger_shuffle_buffer_mixes_row_groups_within_a_batch(data):
    # Row groups hold 70 rows: with the default pool (one row group) a batch's rows come from one
    # or two groups; a pool of several groups mixes them.
    first = _epoch_ids(_reader(data, seed=5, shuffle_buffer_rows=500), 0)
    groups_in_first_batch = {(i // 70) for i in first[:32].tolist()}
    assert len(groups_in_first_batch) >= 4


def test_unshuffled_reader_keeps_file_order(data):
    ids = _epoch_ids(_reader(data, shuffle=False), 0)
    assert ids[:ROWS].tolist() == list(range(ROWS))


def test_iter_batches_spans_epochs(data):
    reader = _reader(data, rank=1, num_ranks=2)
    joined = np.concatenate([b["id"] for b in reader.iter_batches(start_epoch=3, num_epochs=2)])
    separate = np.concatenate([_epoch_ids(reader, 3), _epoch_ids(reader, 4)])
    assert joined.tolist() == separate.tolist()


def test_batches_hold_numpy_columns_and_transformation_applies(data):
    def transform(batch):
        batch["features"] = batch["features"] * 2
        return batch

    reader = _reader(data, columns=["features", "id"], transformation_fn=transform, shuffle=False)
    batch = next(iter(reader.iter_epoch(0)))
    assert set(batch) == {"features", "id"}
    assert batch["features"].shape == (32, 4) and batch["features"].dtype == np.float32
    np.testing.assert_array_equal(batch["features"][:, 0], batch["id"] * 2)


def test_steps_per_epoch_override(data):
    reader = _reader(data, steps_per_epoch=3)
    assert len(list(reader.iter_epoch(0))) == 3


def test_transformation_error_reaches_the_consumer_and_stops_the_thread(data):
    def failing(batch):
        if failing.calls == 2:
            raise KeyError("broken transform")
        failing.calls += 1
        return batch
    failing.calls = 0

    iterator = _reader(data, transformation_fn=failing).iter_epoch(0)
    assert len(list(zip(range(2), iterator))) == 2
    with pytest.raises(KeyError, match="broken transform"):
        next(iterator)
    assert not iterator.alive
    with pytest.raises(StopIteration):
        next(iterator)


def test_read_error_reaches_the_consumer(tmp_path):
    _write(str(tmp_path / "d"), [100, 100], 10)
    store = Store.create(str(tmp_path))
    reader = make_reader("arrow", store=store, path=str(tmp_path / "d"), batch_size=10, shuffle=False,
                         prefetch_batches=1)
    os.remove(str(tmp_path / "d" / "part-00001.parquet"))  # gone after the reader listed it
    with pytest.raises(OSError):
        for _ in reader.iter_epoch(0):
            pass
    assert _no_reader_threads() == []


def test_no_threads_left_behind(data):
    assert _no_reader_threads() == []
    reader = _reader(data, prefetch_batches=1)
    list(reader.iter_epoch(0))                    # exhausted
    with reader.iter_epoch(0) as it:              # left early, with the queue full
        next(it)
        time.sleep(0.2)
    it = reader.iter_batches()                    # endless, closed explicitly
    next(it)
    it.close()
    it = reader.iter_batches()                    # endless, just dropped
    next(it)
    del it
    gc.collect()
    deadline = time.monotonic() + 10
    while _no_reader_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _no_reader_threads() == []


def test_stats_report_rows_per_second(data):
    reader = _reader(data)
    list(reader.iter_epoch(0))
    assert reader.stats.rows == reader.steps_per_epoch * 32
    assert reader.stats.batches == reader.steps_per_epoch
    assert reader.stats.rows_per_second > 0


def test_factory_rejects_unknown_modules_and_accepts_registered_ones(data, monkeypatch):
    with pytest.raises(ValueError, match="unknown data module 'no-such-module'.*arrow"):
        make_reader("no-such-module", store=data[0], path=data[1], batch_size=4)
    from horovod_spark.data import reader as reader_module
    from horovod_spark.data.arrow_reader import ArrowReader

    monkeypatch.setattr(reader_module, "_DATA_MODULES", dict(reader_module._DATA_MODULES))  # undone after the test
    register_data_module("arrow-alias", ArrowReader)
    assert make_reader("arrow-alias", store=data[0], path=data[1], batch_size=4).total_rows == ROWS


def test_missing_columns_are_named(data):
    with pytest.raises(ValueError, match="nope"):
        _reader(data, columns=["id", "nope"])


def test_torch_adapter(data):
    torch = pytest.importorskip("torch")
    from horovod_spark.data import torch_batches

    iterator = _reader(data, shuffle=False).iter_epoch(0)
    batches = torch_batches(iterator)
    batch = next(batches)
    assert batch["features"].dtype == torch.float32 and tuple(batch["features"].shape) == (32, 4)
    assert batch["id"].tolist() == list(range(32))
    batches.close()
    assert not iterator.alive


def test_reading_needs_neither_torch_nor_pyspark():
    code = ("import sys, horovod_spark.data, horovod_spark.data.arrow_reader, horovod_spark.store; "
            "bad = [m for m in ('torch', 'pyspark', 'tensorflow') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)


def test_shuffle_buffer_keeps_every_row_once():
    rng = np.random.default_rng(0)
    buffer = ShuffleBuffer(50, 7, rng)
    out = []
    for start in range(0, 700, 33):
        stop = min(start + 33, 700)
        out.extend(buffer.add({"x": np.arange(start, stop), "y": -np.arange(start, stop)}))
    out.extend(buffer.drain())
    assert all(len(b["x"]) == 7 for b in out)
    assert all((b["y"] == -b["x"]).all() for b in out), "columns of a row must stay together"
    rows = np.concatenate([b["x"] for b in out])
    assert sorted(rows.tolist()) == list(range(700)) and rows.tolist() != list(range(700))
    assert buffer.pending_rows == 0


def test_shuffle_buffer_batches_own_their_memory_and_reset_clears_a_partial_batch():
    buffer = ShuffleBuffer(10, 5, np.random.default_rng(1))
    first = list(buffer.add({"x": np.arange(60, dtype=np.float32).reshape(30, 2)}))
    assert [len(b["x"]) for b in first] == [5, 5, 5, 5] and buffer.pending_rows == 0
    kept = [b["x"].copy() for b in first]
    more = list(buffer.add({"x": np.full((12, 2), -1, dtype=np.float32)}))  # refills every pool slot
    assert len(more) == 2 and buffer.pending_rows == 2
    assert all(np.array_equal(b["x"], k) for b, k in zip(first, kept)), "a batch must not view the pool"
    buffer.reset(np.random.default_rng(2))
    assert buffer.pending_rows == 0
    out = list(buffer.add({"x": np.zeros((20, 2), dtype=np.float32)})) + list(buffer.drain())
    assert [len(b["x"]) for b in out] == [5, 5, 5, 5] and buffer.pending_rows == 0


def test_background_iterator_hands_bursts_over_item_by_item():
    from horovod_spark.data.prefetch import BackgroundIterator, Burst

    def produce():
        yield Burst([1, 2])
        yield Burst()  # an empty burst is skipped, not taken for the end
        yield 3
        yield Burst([4])

    seen = []
    items = BackgroundIterator(produce, 1, name="hs-reader-test", on_item=lambda item, *_: seen.append(item))
    assert list(items) == [1, 2, 3, 4] and seen == [1, 2, 3, 4]
    assert not items.alive


def test_background_iterator_forgets_the_items_of_a_burst_it_handed_out():
    import weakref

    from horovod_spark.data.prefetch import BackgroundIterator, Burst

    class Batch:
        pass

    refs = []

    def produce():
        burst = Burst([Batch(), Batch(), Batch()])  # (this frame keeps the burst itself alive)
        refs.extend(weakref.ref(b) for b in burst)
        yield burst

    items = BackgroundIterator(produce, 1, name="hs-reader-test")
    taken = next(items)
    assert refs[0]() is taken
    del taken
    gc.collect()
    assert refs[0]() is None  # taken and dropped by the consumer: nothing else holds it
    assert len(list(items)) == 2
