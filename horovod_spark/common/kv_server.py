"""Threaded, HMAC-authenticated key-value service: the rendezvous point of a job.

Ranks publish and look up addresses here (``hvd.init``), and the launchers ship functions and
collect results through it. The server is a request dispatcher: a request is a wire message
``(op, *args)`` and ``self.handlers[op](*args)`` produces the reply value. Other services (the Spark
driver service) subclass it and ``add_handler`` their own ops, sharing the store and its condition.

Every connection gets its own thread. A connection whose frame fails authentication, announces an
oversized length, or stalls mid-frame is logged in one line and closed; nothing it sent is decoded,
and other connections are unaffected.
"""
import inspect
import logging
import selectors
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from horovod_spark.common import wire

log = logging.getLogger(__name__)


class RequestError(ValueError):
    """A handler's way of saying the request itself is wrong (bad arguments)."""


class ServiceStopped(RuntimeError):
    """The service is shutting down; blocked requests are released with this."""


def _need_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise RequestError("%s must be a str, got %s" % (name, type(value).__name__))
    return value


def _need_timeout(value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise RequestError("timeout must be a non-negative number, got %r" % (value,))
    return float(value)


class KVStoreServer:
    """``KVStoreServer(key, host='0.0.0.0')``; ``port = start()``; ``stop()``.

    ``read_timeout`` bounds reading one request frame once its first byte arrived and writing the
    reply; ``idle_timeout`` closes a connection with no request for that long (clients reconnect).
    ``max_wait`` caps how long one blocking request may hold its connection.
    """

    def __init__(self, key: bytes, host: str = "0.0.0.0", port: int = 0, *,
                 read_timeout: float = wire.DEFAULT_IO_TIMEOUT, idle_timeout: float = 3600.0,
                 max_frame_bytes: int = wire.DEFAULT_MAX_FRAME_BYTES, max_wait: float = 24 * 3600.0,
                 max_connections: int = 4096):
        if not isinstance(key, (bytes, bytearray)) or not key:
            raise TypeError("KVStoreServer key must be non-empty bytes")
        self._key = bytes(key)
        self.host = host
        self._requested_port = port
        self.port: Optional[int] = None
        self.read_timeout = read_timeout
        self.idle_timeout = idle_timeout
        self.max_frame_bytes = max_frame_bytes
        self.max_wait = max_wait
        self.max_connections = max_connections

        # One condition guards the store and every subclass's state, so a handler can wait for
        # "all tasks registered" the same way get waits for a key.
        self.condition = threading.Condition()
        self._store: Dict[str, Dict[str, bytes]] = {}
        self._stopping = False

        self._listener: Optional[socket.socket] = None
        self._wake_r: Optional[socket.socket] = None
        self._wake_w: Optional[socket.socket] = None
        self._accept_thread: Optional[threading.Thread] = None
        self._conns: Dict[socket.socket, threading.Thread] = {}
        # Every connection thread until it has ended: a thread removes itself from _conns a few
        # instructions before it returns, and stop() must join those too.
        self._threads: Set[threading.Thread] = set()
        self._busy: set = set()  # connections between reading a request and sending its reply
        self._conns_lock = threading.Lock()

        self.handlers: Dict[str, Callable[..., Any]] = {}
        self.add_handler("ping", lambda: "pong")
        self.add_handler("put", self._handle_put)
        self.add_handler("get", self._handle_get)
        self.add_handler("get_many", self._handle_get_many)
        self.add_handler("delete_scope", self._handle_delete_scope)
        self.add_handler("keys", lambda scope: self.keys(_need_str("scope", scope)))

    def add_handler(self, op: str, fn: Callable[..., Any]) -> None:
        """Serve requests ``(op, *args)`` with ``fn(*args)``; its return value is the reply.

        ``fn`` runs on the connection's thread; it may block (use ``wait_until``), raise
        ``RequestError`` for bad input or ``TimeoutError`` with a message for the client.
        """
        self.handlers[op] = fn

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> int:
        if self._listener is not None:
            raise RuntimeError("KVStoreServer already started on port %s" % self.port)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self.host, self._requested_port))
            listener.listen(128)
        except OSError:
            listener.close()
            raise
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="kv-server-accept:%d" % self.port,
                                               daemon=True)
        self._accept_thread.start()
        log.debug("KV service listening on %s:%d", self.host, self.port)
        return self.port

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, release blocked requests, close every connection and join the threads."""
        with self.condition:
            if self._stopping:
                return
            self._stopping = True
            self.condition.notify_all()
        if self._wake_w is not None:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        with self._conns_lock:
            conns = list(self._conns.items())
            busy = set(self._busy)
        # Idle connections are cut at once; requests in flight (a get just released by the
        # notify above) get a moment to send their "stopped" reply, so clients see why.
        for sock, _ in conns:
            if sock not in busy:
                self._shutdown_socket(sock)
        grace_end = time.monotonic() + min(1.0, timeout)
        for sock, thread in conns:
            if sock in busy:
                thread.join(max(0.0, grace_end - time.monotonic()))
                self._shutdown_socket(sock)
        with self._conns_lock:
            threads = set(self._threads) | {t for _, t in conns}
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            log.warning("KV service: %d connection thread(s) still running after stop(): %s",
                        len(stuck), ", ".join(stuck))
        for s in (self._listener, self._wake_r, self._wake_w):
            if s is not None:
                s.close()

    @staticmethod
    def _shutdown_socket(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv on it
        except OSError:
            pass

    def __enter__(self):
        if self._listener is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- accepting ------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, "listen")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stopping:
                for skey, _ in sel.select():
                    if skey.data == "wake":
                        return
                    self._accept_one()
        except Exception:
            log.exception("KV service: accept loop failed; no new connections will be served")
        finally:
            sel.close()

    def _accept_one(self) -> None:
        try:
            conn, peer = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(True)
        with self._conns_lock:
            if self._stopping or len(self._conns) >= self.max_connections:
                log.warning("KV service: refusing connection from %s:%d (%s)", peer[0], peer[1],
                            "stopping" if self._stopping else "%d connections open" % len(self._conns))
                conn.close()
                return
            thread = threading.Thread(target=self._serve_connection, args=(conn, peer),
                                      name="kv-conn:%s:%d" % peer, daemon=True)
            self._conns[conn] = thread
            self._threads = {t for t in self._threads if t.is_alive()}
            self._threads.add(thread)
        thread.start()

    # -- serving one connection -----------------------------------------------------------------
    def _serve_connection(self, conn: socket.socket, peer: Tuple[str, int]) -> None:
        who = "%s:%d" % peer
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while not self._stopping:
                conn.settimeout(self.idle_timeout)
                try:
                    if not conn.recv(1, socket.MSG_PEEK):
                        return  # clean close between requests
                except (TimeoutError, socket.timeout):  # distinct types before Python 3.10
                    log.debug("KV service: closing idle connection from %s", who)
                    return
                except OSError:
                    return  # reset by the peer, or shut down by stop()
                try:
                    payload = wire.recv_frame(conn, self._key, self.max_frame_bytes, self.read_timeout)
                except wire.AuthenticationError as exc:
                    log.warning("KV service: rejected connection from %s: %s", who, exc)
                    return
                except (TimeoutError, socket.timeout):  # distinct types before Python 3.10
                    log.warning("KV service: dropped connection from %s: request frame incomplete after %.0f s",
                                who, self.read_timeout)
                    return
                except OSError as exc:
                    if not self._stopping:
                        log.info("KV service: connection from %s lost: %s", who, exc)
                    return
                with self._conns_lock:
                    self._busy.add(conn)
                try:
                    reply = self._dispatch(payload, who)
                    wire.send_frame(conn, self._key, reply, self.read_timeout)
                except OSError as exc:
                    if not self._stopping:
                        log.info("KV service: could not reply to %s: %s", who, exc)
                    return
                finally:
                    with self._conns_lock:
                        self._busy.discard(conn)
        except Exception:
            log.exception("KV service: unexpected failure serving %s", who)
        finally:
            with self._conns_lock:
                self._conns.pop(conn, None)
                self._busy.discard(conn)
            conn.close()

    def _dispatch(self, payload: bytes, who: str) -> bytes:
        """Decode an authenticated request, run its handler, and encode the reply."""
        try:
            request = wire.decode_message(payload)
            if not isinstance(request, tuple) or not request or not isinstance(request[0], str):
                raise RequestError("a request must be a tuple (op, *args)")
            op, args = request[0], request[1:]
            handler = self.handlers.get(op)
            if handler is None:
                raise RequestError("unknown op %r" % op)
            try:
                inspect.signature(handler).bind(*args)
            except TypeError as exc:
                raise RequestError("bad arguments for %r: %s" % (op, exc)) from None
            value = handler(*args)
            return wire.encode_message(("ok", value))
        except (RequestError, wire.MessageError) as exc:
            log.warning("KV service: bad request from %s: %s", who, exc)
            return wire.encode_message(("err", "bad_request", str(exc)))
        except TimeoutError as exc:
            return wire.encode_message(("err", "timeout", str(exc)))
        except ServiceStopped as exc:
            return wire.encode_message(("err", "stopped", str(exc)))
        except Exception as exc:
            log.exception("KV service: request from %s failed", who)
            return wire.encode_message(("err", "error", "%s: %s" % (type(exc).__name__, exc)))

    # -- waiting helper for handlers --------------------------------------------------------------
    def wait_until(self, predicate: Callable[[], Any], timeout: float, describe: Callable[[], str]) -> Any:
        """Block (holding ``condition`` on return) until ``predicate()`` is truthy; returns its value.

        Must be called with ``self.condition`` held. Raises ``TimeoutError(describe())`` after
        ``timeout`` s (capped by ``max_wait``) and ``ServiceStopped`` if the service stops.
        """
        deadline = time.monotonic() + min(timeout, self.max_wait)
        while True:
            if self._stopping:
                raise ServiceStopped("KV service stopped while waiting: %s" % describe())
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(describe())
            self.condition.wait(remaining)

    # -- the store, in process (the launcher's side) and over the wire ----------------------------
    def put(self, scope: str, key: str, value: bytes) -> None:
        with self.condition:
            self._store.setdefault(scope, {})[key] = bytes(value)
            self.condition.notify_all()

    def get(self, scope: str, key: str, timeout: float) -> bytes:
        with self.condition:
            return self.wait_until(
                lambda: self._lookup(scope, key), timeout,
                lambda: "timed out after %.1f s waiting for KV key %r in scope %r" % (timeout, key, scope))[0]

    def get_many(self, scope: str, keys: Iterable[str], timeout: float) -> Dict[str, bytes]:
        keys = list(keys)

        def all_present():
            values = self._store.get(scope, {})
            return all(k in values for k in keys) and [{k: values[k] for k in keys}]

        def describe():
            missing = [k for k in keys if k not in self._store.get(scope, {})]
            shown = ", ".join(repr(k) for k in missing[:8]) + (" ..." if len(missing) > 8 else "")
            return ("timed out after %.1f s waiting for %d of %d KV keys in scope %r: %s"
                    % (timeout, len(missing), len(keys), scope, shown))

        with self.condition:
            return self.wait_until(all_present, timeout, describe)[0]

    def get_nowait(self, scope: str, key: str) -> Optional[bytes]:
        with self.condition:
            return self._store.get(scope, {}).get(key)

    def keys(self, scope: str) -> List[str]:
        with self.condition:
            return sorted(self._store.get(scope, {}))

    def delete_scope(self, scope: str) -> int:
        with self.condition:
            return len(self._store.pop(scope, {}))

    def _lookup(self, scope: str, key: str):
        values = self._store.get(scope)
        # Wrapped in a list so an empty value still counts as present.
        return [values[key]] if values is not None and key in values else None

    def _handle_put(self, scope, key, value):
        _need_str("scope", scope)
        _need_str("key", key)
        if not isinstance(value, bytes):
            raise RequestError("value must be bytes, got %s" % type(value).__name__)
        self.put(scope, key, value)

    def _handle_get(self, scope, key, timeout):
        return self.get(_need_str("scope", scope), _need_str("key", key), _need_timeout(timeout))

    def _handle_get_many(self, scope, keys, timeout):
        _need_str("scope", scope)
        if not isinstance(keys, (list, tuple)):
            raise RequestError("keys must be a list of str")
        for k in keys:
            _need_str("key", k)
        return self.get_many(scope, keys, _need_timeout(timeout))

    def _handle_delete_scope(self, scope):
        return self.delete_scope(_need_str("scope", scope))
