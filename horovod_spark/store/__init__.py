"""Where prepared data, checkpoints and logs live: ``Store.create(url)`` picks the implementation.

Every store exposes the same layout (``<root>/intermediate_data/<key>/{train,val}``,
``<root>/runs/<run_id>/{checkpoints,logs}``) and the same small file API on top of a
``pyarrow.fs.FileSystem``, so the data and estimator layers never branch on the storage kind.
"""
from horovod_spark.exceptions import StoreAccessError, StoreConnectionError
from horovod_spark.store.base import Store
from horovod_spark.store.dbfs import DBFSLocalStore
from horovod_spark.store.fsspec_store import FsspecStore
from horovod_spark.store.hdfs import HDFSStore
from horovod_spark.store.local import LocalStore

__all__ = ["Store", "LocalStore", "HDFSStore", "DBFSLocalStore", "FsspecStore", "StoreAccessError",
           "StoreConnectionError"]
