"""FsspecStore: any filesystem with an fsspec implementation (s3://, gs://, abfs://, memory://...)."""
from typing import Optional

from horovod_spark.store.base import LAYOUT_KEYWORDS, Store, register_implementation, url_scheme

# Spark's Hadoop connectors name some object stores differently from fsspec.
_SPARK_SCHEMES = {"s3": "s3a"}


@register_implementation(fallback=True)
class FsspecStore(Store):
    """Store paths are URLs; I/O goes through pyarrow's wrapper of the fsspec filesystem so every
    store offers one ``pyarrow.fs.FileSystem``. ``storage_options`` go to the fsspec filesystem."""

    def __init__(self, prefix_path: str, *args, storage_options: Optional[dict] = None, **more_options):
        """Storage options for fsspec as keywords, or as one ``storage_options`` dict (Horovod's
        spelling), or both; ``Store``'s layout keywords (``train_path``, ``runs_path``,
        ``save_runs``...) by name or, after ``prefix_path``, in Horovod's order."""
        self.protocol = url_scheme(prefix_path)
        if not self.protocol:
            raise ValueError("FsspecStore needs a URL with a protocol, got %r" % prefix_path)
        if storage_options is not None and not isinstance(storage_options, dict):
            raise TypeError("storage_options must be a dict of fsspec options, got %s" % type(storage_options).__name__)
        layout = {name: more_options.pop(name) for name in LAYOUT_KEYWORDS if name in more_options}
        self.storage_options = dict(storage_options or {}, **more_options)
        _check_protocol(self.protocol, prefix_path)
        super().__init__(prefix_path, *args, storage_options=self.storage_options, **layout)

    @classmethod
    def matches(cls, path: str) -> bool:
        return bool(url_scheme(path))

    @property
    def fs(self):
        return self._fsspec()

    def _normalize_root(self, prefix_path: str) -> str:
        return prefix_path.rstrip("/")

    def _fsspec(self):
        import fsspec
        return fsspec.filesystem(self.protocol, **self.storage_options)

    def _make_filesystem(self):
        from pyarrow import fs as pafs
        return pafs.PyFileSystem(pafs.FSSpecHandler(self._fsspec()))

    def fs_path(self, path: str) -> str:
        return self._fsspec()._strip_protocol(self.resolve(path))

    def to_spark_path(self, path: str) -> str:
        resolved = self.resolve(path)
        spark_scheme = _SPARK_SCHEMES.get(self.protocol)
        return spark_scheme + resolved[len(self.protocol):] if spark_scheme else resolved


def _check_protocol(protocol: str, url: str) -> None:
    """Fail at Store.create, naming the package to install, not at the first read on a rank."""
    try:
        import fsspec
    except ImportError as exc:
        raise ImportError("Store %r needs fsspec for the %r protocol: pip install fsspec" % (url, protocol)) from exc
    from fsspec.registry import known_implementations
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        package = known_implementations.get(protocol, {}).get("class", "").split(".")[0] or "its fsspec backend"
        raise ImportError("Store %r: fsspec's %r protocol needs the %r package (pip install %s); %s"
                          % (url, protocol, package, package, exc)) from exc
    except ValueError as exc:
        raise ValueError("Store %r: no fsspec implementation for protocol %r (use a local path, hdfs://, "
                         "dbfs:/, or a protocol fsspec knows, e.g. s3://, gs://, abfs://)" % (url, protocol)) from exc
