"""DBFSLocalStore: Databricks File System through its /dbfs FUSE mount on every node."""
import os
import posixpath
from urllib.parse import urlparse

from horovod_spark.exceptions import StoreAccessError
from horovod_spark.store.base import register_implementation, url_scheme
from horovod_spark.store.local import LocalStore

FUSE_ROOT = "/dbfs"


def _local_form(path: str) -> str:
    """``file:/dbfs/a`` and ``file:///dbfs/a`` as the plain path ``/dbfs/a``; others as they are."""
    if url_scheme(path) == "file":
        parsed = urlparse(path)
        return parsed.path if not parsed.netloc else path
    return path


def is_dbfs_path(path: str) -> bool:
    """``dbfs:/...`` (no host), ``/dbfs`` and ``/dbfs/...``, also as ``file:/`` or ``file:///`` URLs."""
    if url_scheme(path) == "dbfs":
        return not path.startswith("dbfs://") or path.startswith("dbfs:///")
    local = _local_form(path)
    return local == FUSE_ROOT or local.startswith(FUSE_ROOT + "/")


def to_fuse_path(path: str) -> str:
    """``dbfs:/a/b`` (or ``dbfs:///a/b``, ``file:/dbfs/a/b``) → ``/dbfs/a/b``; a /dbfs path is returned as is."""
    if url_scheme(path) == "dbfs":
        rest = path.split(":", 1)[1].lstrip("/")
        return posixpath.join(FUSE_ROOT, rest).rstrip("/")
    return _local_form(path) if is_dbfs_path(path) else path


@register_implementation()
class DBFSLocalStore(LocalStore):
    """Python (and the ranks) read and write through the FUSE mount; Spark is given ``dbfs:/``
    URLs, which it reads natively and faster than through FUSE."""

    @classmethod
    def serves(cls, prefix_path: str) -> bool:
        return is_dbfs_path(prefix_path)

    @classmethod
    def matches_dbfs(cls, path: str) -> bool:
        """Whether ``path`` is on DBFS: ``dbfs:/...``, ``/dbfs/...``, ``file:/dbfs/...`` or ``file:///dbfs/...``."""
        return is_dbfs_path(path)

    @staticmethod
    def normalize_path(path: str) -> str:
        """``path`` in the form ``/dbfs/...`` (the FUSE mount); a ValueError for a path not on DBFS."""
        if not is_dbfs_path(path):
            raise ValueError("%r is not a DBFS path: give /dbfs/..., dbfs:/..., file:/dbfs/... or file:///dbfs/..."
                             % (path,))
        return to_fuse_path(path)

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
