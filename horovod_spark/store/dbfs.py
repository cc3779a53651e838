"""DBFSLocalStore: Databricks File System through its /dbfs FUSE mount on every node."""
import os
import posixpath

from horovod_spark.exceptions import StoreAccessError
from horovod_spark.store.base import register_implementation, url_scheme
from horovod_spark.store.local import LocalStore

FUSE_ROOT = "/dbfs"


def is_dbfs_path(path: str) -> bool:
    return url_scheme(path) == "dbfs" or path == FUSE_ROOT or path.startswith(FUSE_ROOT + "/")


def to_fuse_path(path: str) -> str:
    """``dbfs:/a/b`` (or ``dbfs:///a/b``) → ``/dbfs/a/b``; a /dbfs path is returned as is."""
    if url_scheme(path) == "dbfs":
        rest = path.split(":", 1)[1].lstrip("/")
        return posixpath.join(FUSE_ROOT, rest).rstrip("/")
    return path


@register_implementation()
class DBFSLocalStore(LocalStore):
    """Python (and the ranks) read and write through the FUSE mount; Spark is given ``dbfs:/``
    URLs, which it reads natively and faster than through FUSE."""

    @classmethod
    def serves(cls, prefix_path: str) -> bool:
        return is_dbfs_path(prefix_path)

    def checked_on_creation(self) -> bool:
        # A dbfs:/ store made elsewhere, to be used on Databricks later, is checked when a fit starts.
        return os.path.isdir(FUSE_ROOT)

    def _normalize_root(self, prefix_path: str) -> str:
        root = super()._normalize_root(to_fuse_path(prefix_path))
        if not is_dbfs_path(root):
            raise ValueError("DBFSLocalStore needs a /dbfs/... path or dbfs:/ URL, got %r" % prefix_path)
        return root

    def resolve(self, path: str) -> str:
        return super().resolve(to_fuse_path(path))

    def to_spark_path(self, path: str) -> str:
        resolved = self.resolve(path)
        return "dbfs:" + (resolved[len(FUSE_ROOT):] or "/")

    def check_access(self) -> None:
        # Without the mount, creating the root would make a local /dbfs that merely looks like DBFS
        # to everything after (Spark is still given dbfs:/ URLs, which it cannot open).
        if not os.path.isdir(FUSE_ROOT):
            raise StoreAccessError(
                "store path %r is not usable: %s is not mounted on this machine (DBFS exists on Databricks "
                "clusters)\nUse a local directory or another URL here, or run on Databricks." % (self._root, FUSE_ROOT))
        super().check_access()
