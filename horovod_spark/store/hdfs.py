"""HDFSStore: HDFS through pyarrow's libhdfs binding (JNI), connected on first use."""
from typing import Dict, Optional, Tuple
from urllib.parse import urlparse

from horovod_spark.exceptions import StoreConnectionError
from horovod_spark.store.base import Store, register_implementation, url_scheme

# Horovod's driver= chose between libhdfs (JNI) and libhdfs3 (C++) in pyarrow's legacy HDFS client;
# pyarrow.fs.HadoopFileSystem has only the JNI one.
SUPPORTED_DRIVER = "libhdfs"


@register_implementation()
class HDFSStore(Store):
    """Root ``hdfs://host[:port]/path``, ``hdfs:///path`` (the namenode from the Hadoop config), or,
    as in Horovod, an absolute path with the namenode in ``host=`` / ``port=``.

    The keywords are Horovod's, in its order: ``host`` and ``port`` name the namenode (the URL's
    own, when it has them, must agree), ``user`` the HDFS user, ``kerb_ticket`` the path of a
    Kerberos ticket cache, ``extra_conf`` Hadoop settings; ``driver`` must be ``'libhdfs'``; then
    ``Store``'s layout keywords (``train_path``, ``runs_path``, ``save_runs``...).

    Store paths are full URLs (what Spark wants). The pyarrow filesystem is built lazily because
    it needs a JVM, libhdfs and a reachable namenode, which a driver that only computes paths,
    or a test, may not have. Without a port, port 0 lets libhdfs take it from the Hadoop config
    (also right for HA nameservices)."""

    @classmethod
    def serves(cls, prefix_path: str) -> bool:
        return url_scheme(prefix_path) == "hdfs"

    def __init__(self, prefix_path: str, host: Optional[str] = None, port: Optional[int] = None,
                 user: Optional[str] = None, kerb_ticket: Optional[str] = None, driver: str = SUPPORTED_DRIVER,
                 extra_conf: Optional[Dict[str, str]] = None, *args, **layout):
        if driver != SUPPORTED_DRIVER:
            raise ValueError("HDFSStore(driver=%r) is not available: pyarrow's HadoopFileSystem has only the "
                             "JNI driver, libhdfs (libhdfs3 left with pyarrow's legacy HDFS client); leave driver "
                             "out or pass driver='libhdfs'" % (driver,))
        parsed = urlparse(prefix_path)
        scheme = parsed.scheme.lower()
        if scheme not in ("hdfs", "") or (not scheme and not prefix_path.startswith("/")):
            raise ValueError("HDFSStore needs an hdfs:// URL or an absolute path on HDFS, got %r" % (prefix_path,))
        self.host = _agreeing("namenode", parsed.hostname, _host_name(host), prefix_path) or "default"
        self.port = int(_agreeing("port", parsed.port, port, prefix_path) or 0)
        self.user = _agreeing("user", parsed.username, user, prefix_path)
        self.kerb_ticket = kerb_ticket
        self.extra_conf = dict(extra_conf or {})
        super().__init__(prefix_path, *args, **layout)

    @staticmethod
    def parse_url(url: str) -> Tuple[Optional[str], Optional[str], Optional[int], str, int]:
        """``(prefix, host, port, path, path_offset)`` of an HDFS URL or path: ``hdfs://nn:8020/a``
        gives ``('hdfs://', 'nn', 8020, '/a', 14)``, ``/a`` gives ``(None, None, None, '/a', 0)``;
        ``path_offset`` is where the path starts in ``url``."""
        parsed = urlparse(url)
        if not parsed.scheme:
            return None, None, None, url, 0
        prefix = parsed.scheme + "://"
        offset = len(prefix) + len(parsed.netloc)
        return prefix, parsed.hostname, parsed.port, url[offset:], offset

    def _normalize_root(self, prefix_path: str) -> str:
        path = urlparse(prefix_path).path.rstrip("/") or "/"
        return self._url(path)

    def _url(self, path: str) -> str:
        authority = "" if self.host == "default" else self.host + (":%d" % self.port if self.port else "")
        return "hdfs://%s%s" % (authority, path)

    def hadoop_filesystem_kwargs(self) -> dict:
        """The arguments of ``pyarrow.fs.HadoopFileSystem`` this store connects with."""
        return {"host": self.host, "port": self.port, "user": self.user, "kerb_ticket": self.kerb_ticket,
                "extra_conf": self.extra_conf or None}

    def _make_filesystem(self):
        from pyarrow import fs as pafs
        try:
            return pafs.HadoopFileSystem(**self.hadoop_filesystem_kwargs())
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


def _host_name(host: Optional[str]) -> Optional[str]:
    """``host=`` as pyarrow's legacy client took it: a name, or an ``hdfs://name`` URL."""
    if host is None or "://" not in host:
        return host
    return urlparse(host).hostname


def _agreeing(what: str, in_url, given, prefix_path: str):
    if in_url is not None and given is not None and in_url != given:
        raise ValueError("HDFSStore(%r) names %s %r in the URL but %r as a keyword: give it once" %
                         (prefix_path, what, in_url, given))
    return given if given is not None else in_url
