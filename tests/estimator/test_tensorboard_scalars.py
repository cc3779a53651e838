"""EpochScalars (TensorBoard event files of Torch and Keras fits) without a fit: written into a
remote store through the store's own writes, nothing from other ranks or without runs, and one
line instead of files when tensorboard is not installed."""
import logging
import os
import sys

import pytest
from support.tensorboard_events import assert_matches_history

from horovod_spark.estimator.common.tensorboard_scalars import NO_TENSORBOARD, EpochScalars
from horovod_spark.store import LocalStore, Store

pytest.importorskip("tensorboard")
pytest.importorskip("fsspec")

HISTORY = {"loss": [0.9, 0.5], "val_loss": [1.0, 0.7], "accuracy": [0.25, 0.5]}


def _write(scalars, history):
    for epoch in range(len(history["loss"])):
        scalars.epoch_end(epoch, {name: values[epoch] for name, values in history.items()})


def _copy_out(store, logs, directory):
    directory.mkdir()
    for path in store.list(logs):
        (directory / path.rsplit("/", 1)[-1]).write_bytes(store.read_bytes(path))
    return str(directory)


def test_event_files_reach_a_remote_store_after_every_epoch(tmp_path):
    store = Store.create("memory://tensorboard-scalars-%d" % os.getpid())
    assert not isinstance(store, LocalStore)
    scalars = EpochScalars(store, "run1", rank=0)
    logs = store.get_logs_path("run1")
    scalars.epoch_end(0, {name: values[0] for name, values in HISTORY.items()})
    # In the store while the fit still runs, not only at its end.
    assert_matches_history(_copy_out(store, logs, tmp_path / "after_epoch_0"),
                           {name: values[:1] for name, values in HISTORY.items()})
    scalars.epoch_end(1, {name: values[1] for name, values in HISTORY.items()})
    scalars.close()
    assert_matches_history(_copy_out(store, logs, tmp_path / "after_fit"), HISTORY)


def test_only_rank_zero_writes_and_nothing_without_runs(tmp_path):
    store = Store.create(str(tmp_path / "store"))
    scalars = EpochScalars(store, "run1", rank=1)
    _write(scalars, HISTORY)
    scalars.close()
    assert not os.path.exists(store.get_logs_path("run1"))
    no_runs = Store.create(str(tmp_path / "no_runs"), save_runs=False)
    scalars = EpochScalars(no_runs, "run1", rank=0)
    _write(scalars, HISTORY)
    scalars.close()
    assert not os.path.exists(str(tmp_path / "no_runs" / "runs"))


def test_without_tensorboard_the_fit_goes_on_and_says_so_once(tmp_path, monkeypatch, caplog):
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard raises ImportError
    store = Store.create(str(tmp_path / "store"))
    with caplog.at_level(logging.WARNING, logger="horovod_spark"):
        scalars = EpochScalars(store, "run1", rank=0)
        _write(scalars, HISTORY)
        scalars.close()
        quiet = EpochScalars(store, "run2", rank=0, verbose=0)
        quiet.close()
    assert [r.getMessage() for r in caplog.records] == [NO_TENSORBOARD]
    assert not os.path.exists(store.get_logs_path("run1"))


def test_writers_one_after_another_keep_their_own_files(tmp_path):
    # As a re-formed elastic fit's rank 0 may, within the same second.
    store = Store.create(str(tmp_path / "store"))
    for epoch in range(2):
        scalars = EpochScalars(store, "run1", rank=0)
        scalars.epoch_end(epoch, {name: values[epoch] for name, values in HISTORY.items()})
        scalars.close()
    assert len(os.listdir(store.get_logs_path("run1"))) == 2
    assert_matches_history(store.get_logs_path("run1"), HISTORY)
