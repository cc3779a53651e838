"""Horovod's store methods and constructor keywords on our stores, as a ported script or remote trainer
calls them: the layout keywords (train_path, runs_path, save_runs, checkpoint_filename), dataset
indices, files, checkpoints, Parquet datasets, the local output directory synced into the run, the
remote view, and the path helpers of HDFSStore and DBFSLocalStore."""
import os
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from horovod_spark.spark.common.store import DBFSLocalStore, FilesystemStore, HDFSStore, LocalStore, Store

pytestmark = [pytest.mark.timeout(60), pytest.mark.legacy_stack]


def test_dataset_paths_by_horovods_index_and_by_key(tmp_path):
    store = LocalStore(str(tmp_path))
    root = str(tmp_path)
    assert store.get_train_data_path() == root + "/intermediate_data/default/train"
    assert store.get_val_data_path(0) == root + "/intermediate_data/0/val"
    assert store.get_test_data_path("k") == root + "/intermediate_data/k/test"
    with pytest.raises(TypeError, match="a dataset index is a str key, an int or None"):
        store.get_train_data_path(1.5)


def test_horovods_layout_keywords(tmp_path):
    root = str(tmp_path)
    store = LocalStore(root, root + "/train", "val", test_path=root + "/test", runs_path="experiments",
                       checkpoint_filename="model.ckpt")
    assert store.get_train_data_path() == root + "/train" and store.get_train_data_path(2) == root + "/train.2"
    assert store.get_val_data_path(0) == root + "/val.0"  # relative paths are under the root
    assert store.get_test_data_path() == root + "/test"
    assert store.get_runs_path() == root + "/experiments"
    assert store.get_run_path("r1") == root + "/experiments/r1"
    assert store.get_checkpoint_path("r1") == root + "/experiments/r1/checkpoints"
    assert store.get_logs_path("r1") == root + "/experiments/r1/logs" and store.get_logs_subdir() == "logs"
    assert store.get_checkpoint_filename() == "model.ckpt"
    assert LocalStore(root).get_checkpoint_filename() == "checkpoint"
    assert store.saving_runs()
    no_runs = Store.create(root, save_runs=False)
    assert not no_runs.saving_runs()
    assert no_runs.get_checkpoint_path("r1") is None and no_runs.get_logs_path("r1") is None
    with pytest.raises(TypeError, match="save_runs must be True or False"):
        LocalStore(root, save_runs="no")


def test_a_fit_refuses_a_store_that_keeps_no_runs(tmp_path):
    from horovod_spark.estimator.common.checkpoint import CheckpointStore
    with pytest.raises(ValueError, match=r"save_runs=False.*create the store with save_runs=True"):
        CheckpointStore(LocalStore(str(tmp_path), save_runs=False), "r1")


def test_files_and_checkpoints(tmp_path):
    store = Store.create(str(tmp_path))
    store.write_text("notes/a.txt", "héllo")
    assert store.read("notes/a.txt") == "héllo".encode() and store.exists("notes/a.txt")
    with pytest.raises(TypeError, match="write_text writes a str"):
        store.write_text("notes/b.txt", b"bytes")
    assert store.get_checkpoints("r1") == []
    for name in ("epoch-00002.ckpt", "epoch-00001.ckpt", "run.json"):
        store.write_bytes(os.path.join(store.get_checkpoint_path("r1"), name), b"x")
    assert store.get_checkpoints("r1") == [store.get_checkpoint_path("r1") + "/epoch-0000%d.ckpt" % n for n in (1, 2)]
    assert store.get_checkpoints("r1", suffix=".json") == [store.get_checkpoint_path("r1") + "/run.json"]


def test_parquet_datasets(tmp_path):
    store = Store.create(str(tmp_path))
    pq.write_table(pa.table({"x": [1, 2, 3]}), str(tmp_path / "data.parquet"))
    os.makedirs(tmp_path / "pq")
    os.rename(tmp_path / "data.parquet", tmp_path / "pq" / "part-0.parquet")
    os.makedirs(tmp_path / "empty")
    assert store.is_parquet_dataset("pq") and store.get_parquet_dataset("pq").read().num_rows == 3
    assert not store.is_parquet_dataset("empty") and not store.is_parquet_dataset("missing")


def test_a_local_output_directory_synced_into_the_run(tmp_path):
    store = Store.create(str(tmp_path / "store"))
    local_dir_fn = pickle.loads(pickle.dumps(store.get_local_output_dir_fn("r1")))
    sync = pickle.loads(pickle.dumps(store.sync_fn("r1")))  # both travel to Spark tasks
    with local_dir_fn() as local:
        os.makedirs(os.path.join(local, "logs"))
        with open(os.path.join(local, "checkpoint"), "w") as f:
            f.write("1")
        with open(os.path.join(local, "logs", "events"), "w") as f:
            f.write("e")
        sync(local)
        with open(os.path.join(local, "checkpoint"), "w") as f:
            f.write("2")
        sync(local)  # files that exist are replaced
    assert not os.path.exists(local)
    assert store.read(store.get_run_path("r1") + "/checkpoint") == b"2"
    assert store.read(store.get_run_path("r1") + "/logs/events") == b"e"


def test_the_remote_view_and_the_filesystem_helpers(tmp_path):
    store = Store.create(str(tmp_path))
    remote = pickle.loads(pickle.dumps(store.to_remote("r1", 3)))
    assert remote.train_data_path == store.get_train_data_path(3) and remote.val_data_path == store.get_val_data_path(3)
    assert remote.checkpoint_path == store.get_checkpoint_path("r1") and remote.saving_runs
    assert remote.checkpoint_filename == "checkpoint" and remote.logs_subdir == "logs"
    assert callable(remote.sync) and callable(remote.get_local_output_dir)
    store.write_text("f.txt", "x")
    assert store.fs.exists(store.get_localized_path("f.txt")) and store.get_filesystem().isfile(
        store.get_localized_path("f.txt"))
    assert store.get_full_path("f.txt") == "file://%s/f.txt" % tmp_path
    assert pickle.loads(pickle.dumps(store.get_full_path_fn()))("f.txt") == store.get_full_path("f.txt")
    assert LocalStore.matches(str(tmp_path)) and not LocalStore.matches("s3://bucket/a")
    assert HDFSStore.matches("hdfs:///a") and FilesystemStore.matches("s3://bucket/a")


def test_fsspec_store_takes_the_layout_keywords_and_its_options():
    pytest.importorskip("fsspec")
    store = Store.create("memory://bucket/run", runs_path="memory://bucket/runs",
                         storage_options={"skip_instance_cache": True})
    assert store.get_run_path("r") == "memory://bucket/runs/r"
    assert store.storage_options == {"skip_instance_cache": True}
    store.write_text("a.txt", "x")
    assert store.fs.cat_file(store.get_localized_path("a.txt")) == b"x"


def test_hdfs_parse_url():
    assert HDFSStore.parse_url("hdfs://nn:8020/user/a") == ("hdfs://", "nn", 8020, "/user/a", 14)
    assert HDFSStore.parse_url("hdfs:///user/a") == ("hdfs://", None, None, "/user/a", 7)
    assert HDFSStore.parse_url("/user/a") == (None, None, None, "/user/a", 0)
    store = HDFSStore("/user/a", "nn", 8020, runs_path="/user/runs")
    assert store.get_run_path("r") == "hdfs://nn:8020/user/runs/r"


def test_dbfs_path_forms():
    for path in ("dbfs:/ml/x", "/dbfs/ml/x", "file:/dbfs/ml/x", "file:///dbfs/ml/x"):
        assert DBFSLocalStore.matches_dbfs(path), path
        assert DBFSLocalStore.normalize_path(path) == "/dbfs/ml/x", path
    for path in ("/tmp/x", "dbfs://host/x", "file://host/dbfs/x", "/dbfsx"):
        assert not DBFSLocalStore.matches_dbfs(path), path
    with pytest.raises(ValueError, match="is not a DBFS path: give /dbfs/"):
        DBFSLocalStore.normalize_path("/tmp/x")
    assert type(Store.create("file:///dbfs/ml/x", check=False)) is DBFSLocalStore


def test_a_store_pickled_before_the_layout_keywords_loads_with_their_defaults(tmp_path):
    store = LocalStore(str(tmp_path))
    state = store.__getstate__()
    for name in ("_dataset_paths", "_runs_path", "_save_runs", "storage_options", "checkpoint_filename"):
        state.pop(name)
    old = LocalStore.__new__(LocalStore)
    old.__setstate__(state)
    assert old == store and old.get_checkpoint_path("r") == store.get_checkpoint_path("r")
