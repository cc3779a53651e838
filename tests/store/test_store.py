"""Store.create dispatch, the layout, and the file operations on real filesystems (local, fsspec memory)."""
import os
import pickle
import uuid

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from horovod_spark.store import DBFSLocalStore, FsspecStore, HDFSStore, LocalStore, Store, StoreConnectionError

# legacy_stack: scripts/run_tests.sh also runs this module on the older stack (pyspark 3.5, pyarrow 14).
pytestmark = [pytest.mark.timeout(60), pytest.mark.legacy_stack]


# -- choosing the implementation ---------------------------------------------------------------

def test_create_picks_local_for_paths_and_file_urls(tmp_path):
    for url in (str(tmp_path), "file://" + str(tmp_path), str(tmp_path) + "/"):
        store = Store.create(url)
        assert type(store) is LocalStore
        assert store.prefix_path == str(tmp_path)


def test_create_makes_relative_paths_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Store.create("relative/dir").prefix_path == str(tmp_path / "relative" / "dir")


def test_create_picks_dbfs_for_fuse_paths_and_dbfs_urls():
    for url in ("/dbfs/ml/hs", "dbfs:/ml/hs", "dbfs:///ml/hs"):
        store = Store.create(url)
        assert type(store) is DBFSLocalStore
        assert store.prefix_path == "/dbfs/ml/hs"
        assert store.get_train_data_path("k") == "/dbfs/ml/hs/intermediate_data/k/train"
        assert store.to_spark_path(store.get_train_data_path("k")) == "dbfs:/ml/hs/intermediate_data/k/train"
        assert store.resolve("dbfs:/ml/hs/x") == "/dbfs/ml/hs/x"


def test_create_picks_hdfs_and_parses_namenode():
    store = Store.create("hdfs://nn.example:9000/user/me/hs/")
    assert type(store) is HDFSStore
    assert (store.host, store.port) == ("nn.example", 9000)
    assert store.prefix_path == "hdfs://nn.example:9000/user/me/hs"
    assert store.get_checkpoint_path("run1") == "hdfs://nn.example:9000/user/me/hs/runs/run1/checkpoints"
    assert store.fs_path(store.get_checkpoint_path("run1")) == "/user/me/hs/runs/run1/checkpoints"
    assert store.to_spark_path(store.get_train_data_path("k")) == \
        "hdfs://nn.example:9000/user/me/hs/intermediate_data/k/train"
    assert store.resolve("/user/other") == "hdfs://nn.example:9000/user/other"

    default = Store.create("hdfs:///user/me/hs", user="me")
    assert (default.host, default.port, default.user) == ("default", 0, "me")
    assert default.prefix_path == "hdfs:///user/me/hs"
    assert default.fs_path(default.get_logs_path("r")) == "/user/me/hs/runs/r/logs"

    ha = Store.create("hdfs://nameservice1/data")
    assert (ha.host, ha.port) == ("nameservice1", 0)  # port 0: libhdfs takes it from the Hadoop config


def test_hdfs_paths_on_another_namenode_are_refused():
    store = Store.create("hdfs://nn1:8020/a")
    with pytest.raises(ValueError, match="nn2"):
        store.resolve("hdfs://nn2:8020/a/b")


def test_hdfs_connects_lazily_and_explains_a_failed_connection():
    store = Store.create("hdfs://nn.invalid:8020/user/me")  # constructing it needs no HDFS
    with pytest.raises(StoreConnectionError) as info:
        store.exists(store.get_train_data_path("k"))
    message = str(info.value)
    assert "hdfs://nn.invalid:8020/user/me" in message
    assert "CLASSPATH" in message and "libhdfs" in message
    assert len(message.splitlines()) == 1  # not pyarrow's pages of dlopen attempts


def test_hdfs_takes_horovods_keywords_in_horovods_order():
    store = HDFSStore("/user/me/hs", "nn.example", 9000, "me", "/tmp/krb5cc_1000", "libhdfs", {"dfs.replication": "2"})
    assert store.prefix_path == "hdfs://nn.example:9000/user/me/hs"
    assert store.hadoop_filesystem_kwargs() == {"host": "nn.example", "port": 9000, "user": "me",
                                                "kerb_ticket": "/tmp/krb5cc_1000",
                                                "extra_conf": {"dfs.replication": "2"}}
    same = HDFSStore("hdfs://nn.example:9000/user/me/hs", host="hdfs://nn.example", port=9000)
    assert same.prefix_path == store.prefix_path
    default = HDFSStore("/data", user="me")
    assert default.hadoop_filesystem_kwargs() == {"host": "default", "port": 0, "user": "me", "kerb_ticket": None,
                                                  "extra_conf": None}
    assert default.prefix_path == "hdfs:///data"
    assert Store.create("hdfs:///data", host="nn", port=8020).prefix_path == "hdfs://nn:8020/data"


def test_hdfs_keywords_reach_pyarrow_which_then_needs_libhdfs():
    # The arguments are pyarrow's (a misnamed one would be a TypeError); without a JVM and libhdfs
    # the connection fails with the clear error, whatever the keywords.
    store = HDFSStore("/user/me", host="nn.invalid", port=8020, user="me", kerb_ticket="/tmp/krb5cc_none",
                      extra_conf={"dfs.replication": "1"})
    with pytest.raises(StoreConnectionError, match="libhdfs") as info:
        store.filesystem()
    assert isinstance(info.value.__cause__, OSError)


@pytest.mark.parametrize("kwargs, prefix, match", [
    ({"driver": "libhdfs3"}, "/a", "driver='libhdfs3'.*only the JNI driver"),
    ({"host": "nn2"}, "hdfs://nn1/a", "namenode 'nn1' in the URL but 'nn2'"),
    ({"port": 9000}, "hdfs://nn1:8020/a", "port 8020 in the URL but 9000"),
    ({}, "relative/path", "absolute path"),
])
def test_hdfs_refuses_what_it_cannot_honour(kwargs, prefix, match):
    with pytest.raises(ValueError, match=match):
        HDFSStore(prefix, **kwargs)


def test_create_picks_fsspec_for_other_urls():
    store = Store.create("memory://bucket/hs")
    assert type(store) is FsspecStore
    assert store.protocol == "memory"
    assert isinstance(store.filesystem(), pafs.FileSystem)


def test_fsspec_storage_options_as_keywords_or_as_horovods_dict():
    assert Store.create("memory://bucket/a", storage_options={"skip_instance_cache": True}).storage_options == {
        "skip_instance_cache": True}
    assert Store.create("memory://bucket/b", skip_instance_cache=True).storage_options == {"skip_instance_cache": True}
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        Store.create("memory://bucket/c", storage_options="key=secret")


def test_fsspec_protocol_without_its_package_names_the_package():
    pytest.importorskip("fsspec")
    try:
        import s3fs  # noqa: F401
        pytest.skip("s3fs is installed here")
    except ImportError:
        pass
    with pytest.raises(ImportError, match="s3fs"):
        Store.create("s3://bucket/prefix")


def test_unknown_protocol_is_a_clear_error():
    with pytest.raises(ValueError, match="no fsspec implementation for protocol 'nosuchfs'"):
        Store.create("nosuchfs://x/y")


@pytest.mark.parametrize("bad", ["", "   ", None])
def test_create_refuses_empty(bad):
    with pytest.raises(ValueError):
        Store.create(bad)


# -- layout -------------------------------------------------------------------------------------

def test_layout(tmp_path):
    store = Store.create(str(tmp_path))
    root = str(tmp_path)
    assert store.get_data_path("abc") == root + "/intermediate_data/abc"
    assert store.get_train_data_path("abc") == root + "/intermediate_data/abc/train"
    assert store.get_val_data_path("abc") == root + "/intermediate_data/abc/val"
    assert store.get_data_metadata_path("abc") == root + "/intermediate_data/abc/metadata.json"
    assert store.get_run_path("r1") == root + "/runs/r1"
    assert store.get_checkpoint_path("r1") == root + "/runs/r1/checkpoints"
    assert store.get_logs_path("r1") == root + "/runs/r1/logs"
    assert store.to_spark_path(store.get_train_data_path("abc")) == "file://" + root + "/intermediate_data/abc/train"
    for bad in ("", "a/b", "..", None):
        with pytest.raises(ValueError):
            store.get_run_path(bad)


# -- file operations, on every store we can run here --------------------------------------------

@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    if request.param == "local":
        return Store.create(str(tmp_path / "store"))
    return Store.create("memory://test-%s/store" % uuid.uuid4().hex[:8])


def test_write_read_exists_list_delete(store):
    path = store.join("runs", "r", "logs", "a.txt")
    assert not store.exists(path)
    store.write_bytes(path, b"hello")
    assert store.exists(path) and not store.is_dir(path)
    assert store.read_bytes(path) == b"hello"
    store.write_bytes(store.join("runs", "r", "logs", "b.txt"), b"x")
    assert store.list(store.get_logs_path("r")) == [store.join("runs/r/logs/a.txt"), store.join("runs/r/logs/b.txt")]
    assert store.read_bytes("runs/r/logs/b.txt") == b"x"  # relative to the root
    store.delete(store.get_run_path("r"))
    assert not store.exists(store.get_run_path("r"))
    store.delete(store.get_run_path("r"))  # already gone: not an error


def test_atomic_write_replaces_whole_file_and_leaves_no_temporaries(store):
    path = store.get_data_metadata_path("k")
    store.write_bytes_atomic(path, b"first")
    store.write_bytes_atomic(path, b"second version")
    assert store.read_bytes(path) == b"second version"
    assert store.list(store.get_data_path("k")) == [path]


def test_failed_atomic_write_keeps_old_content_and_no_temporaries(store):
    path = store.get_data_metadata_path("k")
    store.write_bytes_atomic(path, b"good")
    with pytest.raises(TypeError):
        store.write_bytes_atomic(path, object())  # fails inside the write, after the temporary exists
    assert store.read_bytes(path) == b"good"
    assert store.list(store.get_data_path("k")) == [path]


def test_move(store):
    store.write_bytes(store.join("a", "f.bin"), b"1")
    store.move(store.join("a"), store.join("b", "c"))
    assert not store.exists(store.join("a"))
    assert store.read_bytes(store.join("b", "c", "f.bin")) == b"1"


def test_filesystem_and_fs_path_serve_pyarrow_dataset(store):
    directory = store.get_train_data_path("k")
    store.makedirs(directory)
    fs = store.filesystem()
    with fs.open_output_stream(store.fs_path(directory + "/part-0.parquet")) as f:
        pq.write_table(pa.table({"x": [1, 2, 3]}), f)
    dataset = ds.dataset(store.fs_path(directory), filesystem=fs, format="parquet")
    assert dataset.to_table()["x"].to_pylist() == [1, 2, 3]


def test_stores_pickle_without_their_filesystem(store):
    store.write_bytes("p/x", b"1")
    assert store._fs is not None
    clone = pickle.loads(pickle.dumps(store))
    assert clone == store and clone._fs is None
    assert clone.read_bytes("p/x") == b"1"


def test_local_to_spark_path_is_a_file_url(tmp_path):
    store = LocalStore(str(tmp_path))
    assert store.to_spark_path("x") == "file://%s/x" % tmp_path
    assert store.resolve("file://%s/y" % tmp_path) == os.path.join(str(tmp_path), "y")


def test_fsspec_paths():
    store = Store.create("memory://bkt/root")
    assert store.get_train_data_path("k") == "memory://bkt/root/intermediate_data/k/train"
    assert store.fs_path(store.get_train_data_path("k")) == "/bkt/root/intermediate_data/k/train"
    assert store.to_spark_path("x") == "memory://bkt/root/x"


@pytest.mark.skipif(os.path.isdir("/dbfs"), reason="this machine has a /dbfs mount")
def test_dbfs_store_without_the_mount_creates_nothing_and_its_check_names_the_mount():
    from horovod_spark.exceptions import StoreAccessError
    store = Store.create("/dbfs/ml/hs-check")
    assert not os.path.exists("/dbfs")
    with pytest.raises(StoreAccessError, match="/dbfs is not mounted on this machine"):
        store.check_access()
    assert not os.path.exists("/dbfs")
