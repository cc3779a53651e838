"""LocalStore: a directory on a local (or locally mounted, shared) filesystem."""
import os
from urllib.parse import unquote, urlparse

from horovod_spark.store.base import Store, register_implementation, url_scheme


@register_implementation()
class LocalStore(Store):
    """Root given as a plain path or a ``file://`` URL; store paths are absolute local paths.
    With Spark on a cluster the directory must be visible to every executor (NFS, FUSE mount)."""

    @classmethod
    def serves(cls, prefix_path: str) -> bool:
        return url_scheme(prefix_path) in ("", "file")

    def checked_on_creation(self) -> bool:
        return True

    def _normalize_root(self, prefix_path: str) -> str:
        return _local_path(prefix_path)

    def _make_filesystem(self):
        from pyarrow import fs as pafs
        return pafs.LocalFileSystem()

    def resolve(self, path: str) -> str:
        if url_scheme(path) == "file":
            return _local_path(path)
        return super().resolve(path)

    def fs_path(self, path: str) -> str:
        return self.resolve(path)

    def to_spark_path(self, path: str) -> str:
        # A bare path would be resolved against Spark's default filesystem (HDFS on a cluster).
        return "file://" + self.resolve(path)


def _local_path(path: str) -> str:
    if url_scheme(path) == "file":
        parsed = urlparse(path)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError("file:// URL with a host is not a local path: %r" % path)
        path = unquote(parsed.path)
    return os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"
