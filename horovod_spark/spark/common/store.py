"""``horovod_spark.spark.common.store``: Horovod's path to the stores (``horovod.spark.common.store``).

The classes are ``horovod_spark.store``'s; Horovod's ``FilesystemStore`` (any fsspec filesystem) is
``FsspecStore`` here.
"""
from horovod_spark.store import DBFSLocalStore, FsspecStore, HDFSStore, LocalStore, Store

FilesystemStore = FsspecStore

__all__ = ["Store", "LocalStore", "HDFSStore", "DBFSLocalStore", "FilesystemStore", "FsspecStore"]
