"""Client of the authenticated key-value service (``horovod_spark.common.kv_server``).

Requests and replies are wire messages (``horovod_spark.common.wire``): a request is a tuple
``(op, *args)``; a reply is ``("ok", value)`` or ``("err", kind, text)``. Each connection starts
with the handshake in which client and service prove to each other that they hold the job's
secret, and every frame after it carries the connection's MAC and sequence number; nothing is
decoded before its frame verified.

One client holds one connection, used under a lock: a blocking ``get`` holds it for its whole wait,
so threads that must not queue behind a long get should each use their own ``KVClient``.
"""
import socket
import ssl
import threading
import time
from typing import Any, Dict, Iterable, List, Optional

from horovod_spark.common import config, wire, wire_tls
from horovod_spark.exceptions import ConfigError, KVError

# Extra seconds a reply may take beyond the server-side wait, so the server's own timeout (with its
# clear message) fires before our socket timeout does.
_REPLY_MARGIN = 10.0

# Values above this are split by put_blob into several keys so no frame nears the frame cap.
BLOB_CHUNK_BYTES = 16 * 1024 * 1024


class KVClient:
    """``KVClient(addr, port, key)``: ``put``/``get``/``get_many`` against a ``KVStoreServer``.

    ``io_timeout`` bounds connecting and every non-blocking request; blocking gets add their own
    ``timeout``. ``tls``: connect through TLS (default: ``HOROVOD_SPARK_TLS``). A request that
    fails because the connection dropped (e.g. the server closed it after idling) is retried once
    on a fresh connection, so server handlers must tolerate a repeat.
    """

    def __init__(self, addr: str, port: int, key: bytes, io_timeout: float = wire.DEFAULT_IO_TIMEOUT,
                 max_frame_bytes: int = wire.DEFAULT_MAX_FRAME_BYTES, tls: Optional[bool] = None):
        if not isinstance(key, (bytes, bytearray)) or not key:
            raise TypeError("KVClient key must be non-empty bytes (bytes.fromhex(HOROVOD_SECRET_KEY))")
        self.addr = addr
        self.port = int(port)
        self._key = bytes(key)
        self._io_timeout = io_timeout
        self._max_frame_bytes = max_frame_bytes
        self._tls = wire_tls.enabled() if tls is None else bool(tls)
        self._session: Optional[wire.Session] = None
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ=None, **kwargs) -> "KVClient":
        """A client for the service named by HOROVOD_RENDEZVOUS_ADDR/PORT and HOROVOD_SECRET_KEY."""
        needed = (config.RENDEZVOUS_ADDR, config.RENDEZVOUS_PORT, config.SECRET_KEY)
        missing = [v.name for v in needed if not v.is_set(environ)]
        if missing:
            raise ConfigError("the rendezvous environment is incomplete: %s not set (the launchers, "
                              "horovod-spark-run, run_local and horovod_spark.run, set them for each rank)"
                              % ", ".join(missing))
        addr, port, key = (v.get(environ) for v in needed)
        kwargs.setdefault("tls", wire_tls.enabled(environ))
        return cls(addr, port, key, **kwargs)

    def __repr__(self):
        return "KVClient(%s:%d)" % (self.addr, self.port)

    # -- connection -------------------------------------------------------------------------
    def _connect(self) -> wire.Session:
        where = "%s:%d" % (self.addr, self.port)
        try:
            sock = socket.create_connection((self.addr, self.port), timeout=self._io_timeout)
        except OSError as exc:
            raise ConnectionError("cannot reach the KV service at %s: %s" % (where, exc)) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls:
                sock = wire_tls.wrap_client(sock, self._io_timeout)
            return wire.client_handshake(sock, self._key, self._io_timeout)
        except wire.AuthenticationError as exc:
            sock.close()
            raise KVError("the service at %s refused us or failed to prove it holds the job's secret: %s"
                          % (where, exc)) from None
        except ssl.SSLError as exc:
            sock.close()
            raise KVError("TLS with the service at %s failed: %s (both ends must agree on %s)"
                          % (where, exc, config.SPARK_TLS.name)) from None
        except BaseException:
            sock.close()
            raise

    def _drop(self) -> None:
        if self._session is not None:
            try:
                self._session.sock.close()
            finally:
                self._session = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self._drop()
        except Exception:
            pass

    # -- requests ---------------------------------------------------------------------------
    def _roundtrip(self, payload: bytes, reply_timeout: float) -> Any:
        if self._session is None:
            self._session = self._connect()
        self._session.send(payload, timeout=self._io_timeout)
        return self._session.recv_message(self._max_frame_bytes, timeout=reply_timeout)

    def request(self, op: str, *args: Any, wait: float = 0.0) -> Any:
        """Send ``(op, *args)`` and return the reply value; ``wait`` is how long the server may block.

        Services built on ``KVStoreServer`` add ops; this is how their clients call them.
        """
        payload = wire.encode_message((op,) + args)
        if len(payload) > self._max_frame_bytes:
            raise ValueError("KV request %r is %d bytes, above the %d-byte frame cap; use put_blob"
                             % (op, len(payload), self._max_frame_bytes))
        reply_timeout = self._io_timeout + max(0.0, wait) + (_REPLY_MARGIN if wait else 0.0)
        with self._lock:
            for attempt in (0, 1):
                try:
                    reply = self._roundtrip(payload, reply_timeout)
                    break
                except (TimeoutError, socket.timeout):  # distinct types before Python 3.10
                    # The server may still be working on it; retrying could duplicate the request.
                    self._drop()
                    raise TimeoutError("no reply from the KV service at %s:%d to %r within %.1f s"
                                       % (self.addr, self.port, op, reply_timeout)) from None
                except OSError as exc:  # ConnectionError and friends: stale or dropped connection
                    self._drop()
                    if attempt == 1:
                        raise ConnectionError("KV request %r to %s:%d failed: %s"
                                              % (op, self.addr, self.port, exc)) from exc
                except (wire.AuthenticationError, wire.MessageError) as exc:
                    self._drop()
                    raise KVError("bad reply from the KV service at %s:%d to %r: %s"
                                  % (self.addr, self.port, op, exc)) from None
        if not isinstance(reply, tuple) or not reply or reply[0] not in ("ok", "err"):
            raise KVError("malformed reply from the KV service: %r" % (reply,))
        if reply[0] == "ok":
            return reply[1] if len(reply) > 1 else None
        kind = reply[1] if len(reply) > 1 else "error"
        text = reply[2] if len(reply) > 2 else "KV service error (%s)" % kind
        if kind == "timeout":
            raise TimeoutError(text)
        raise KVError(text)

    def put(self, scope: str, key: str, value: bytes) -> None:
        if not isinstance(value, (bytes, bytearray)):
            raise TypeError("KVClient.put value must be bytes, got %s" % type(value).__name__)
        self.request("put", scope, key, bytes(value))

    def get(self, scope: str, key: str, timeout: float) -> bytes:
        """The value of ``scope``/``key``, waiting up to ``timeout`` s for it to be put."""
        return self.request("get", scope, key, float(timeout), wait=float(timeout))

    def get_many(self, scope: str, keys: Iterable[str], timeout: float) -> Dict[str, bytes]:
        """All of ``keys`` in ``scope`` once every one is present (one wait for the lot)."""
        return self.request("get_many", scope, list(keys), float(timeout), wait=float(timeout))

    def keys(self, scope: str) -> List[str]:
        """The keys ``scope`` holds now, sorted."""
        return self.request("keys", scope)

    def delete_scope(self, scope: str) -> int:
        """Remove every key of ``scope``; returns how many there were."""
        return self.request("delete_scope", scope)

    # -- values bigger than one frame -------------------------------------------------------
    def put_blob(self, scope: str, key: str, data: bytes) -> None:
        """Store ``data`` of any size under ``key`` as chunks; ``key`` itself (the chunk count) is
        written last so a reader waiting on it finds every chunk already there."""
        n = max(1, -(-len(data) // BLOB_CHUNK_BYTES))
        view = memoryview(data)
        for i in range(n):
            self.put(scope, "%s#%d" % (key, i), bytes(view[i * BLOB_CHUNK_BYTES:(i + 1) * BLOB_CHUNK_BYTES]))
        self.put(scope, key, b"%d" % n)

    def get_blob(self, scope: str, key: str, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        n = int(self.get(scope, key, timeout))
        parts = [self.get(scope, "%s#%d" % (key, i), max(0.0, deadline - time.monotonic()))
                 for i in range(n)]
        return b"".join(parts)
