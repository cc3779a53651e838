"""HDFSStore: HDFS through pyarrow's libhdfs binding (JNI), connected on first use."""
from typing import Dict, Optional
from urllib.parse import urlparse

from horovod_spark.exceptions import StoreConnectionError
from horovod_spark.store.base import Store


class HDFSStore(Store):
    """Root ``hdfs://host[:port]/path`` or ``hdfs:///path`` (the namenode from the Hadoop config).

    Store paths are full URLs (what Spark wants). The pyarrow filesystem is built lazily because
    it needs a JVM, libhdfs and a reachable namenode, which a driver that only computes paths,
    or a test, may not have. Without a port, port 0 lets libhdfs take it from the Hadoop config
    (also right for HA nameservices)."""

    def __init__(self, prefix_path: str, user: Optional[str] = None, kerb_ticket: Optional[str] = None,
                 extra_conf: Optional[Dict[str, str]] = None, port: Optional[int] = None):
        parsed = urlparse(prefix_path)
        if parsed.scheme.lower() != "hdfs":
            raise ValueError("HDFSStore needs an hdfs:// URL, got %r" % prefix_path)
        self.host = parsed.hostname or "default"
        self.port = port if port is not None else (parsed.port or 0)
        self.user = user or parsed.username
        self.kerb_ticket = kerb_ticket
        self.extra_conf = dict(extra_conf or {})
        super().__init__(prefix_path)

    def _normalize_root(self, prefix_path: str) -> str:
        path = urlparse(prefix_path).path.rstrip("/") or "/"
        return self._url(path)

    def _url(self, path: str) -> str:
        authority = "" if self.host == "default" else self.host + (":%d" % self.port if self.port else "")
        return "hdfs://%s%s" % (authority, path)

    def _make_filesystem(self):
        from pyarrow import fs as pafs
        try:
            return pafs.HadoopFileSystem(self.host, self.port, user=self.user, kerb_ticket=self.kerb_ticket,
                                         extra_conf=self.extra_conf or None)
        except Exception as exc:  # pyarrow raises OSError with pages of dlopen attempts
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreConnectionError(
                "cannot connect to HDFS for store %s (namenode %s, port %s): %s. pyarrow needs a JVM "
                "(JAVA_HOME), libhdfs (HADOOP_HOME or ARROW_LIBHDFS_DIR) and the Hadoop jars on CLASSPATH "
                "(export CLASSPATH=$(hadoop classpath --glob)), and the namenode must be reachable."
                % (self._root, self.host, self.port or "from Hadoop config", first_line)) from exc

    def resolve(self, path: str) -> str:
        parsed = urlparse(path)
        if parsed.scheme.lower() == "hdfs":
            if parsed.hostname and parsed.hostname != self.host:
                raise ValueError("%r is on namenode %r, but this store is on %r" % (path, parsed.hostname, self.host))
            return self._url(parsed.path)
        if path.startswith("/"):
            return self._url(path)
        return super().resolve(path)

    def fs_path(self, path: str) -> str:
        return urlparse(self.resolve(path)).path

    def to_spark_path(self, path: str) -> str:
        return self.resolve(path)
