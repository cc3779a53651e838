"""Threaded, HMAC-authenticated key-value service: the rendezvous point of a job.

Ranks publish and look up addresses here (``hvd.init``), and the launchers ship functions and
collect results through it. The server is a request dispatcher: a request is a wire message
``(op, *args)`` and ``self.handlers[op](*args)`` produces the reply value. Other services (the Spark
driver service) subclass it and ``add_handler`` their own ops, sharing the store and its condition.

Every connection gets its own thread and must first prove it holds the job's secret (the handshake
of ``horovod_spark.common.wire``) within a few seconds. A connection that fails the handshake or a
frame's MAC, replays a frame, announces an oversized length, or stalls is logged in one line and
closed; nothing it sent is decoded, and other connections are unaffected. Those lines are
rate-limited (``security_log.RateLimitedLog``): past a few per interval they are counted per source
address and reason and summarised in one line, so an attacker cannot flood the driver's log. The accept loop outlives
any error, running out of file descriptors included.
"""
import errno
import inspect
import logging
import select
import selectors
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from horovod_spark.common import config, wire, wire_tls
from horovod_spark.common.security_log import RateLimitedLog

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


class _Connection:
    """One accepted connection: its socket (replaced by the TLS socket once wrapped), its thread,
    and whether it has proven it holds the secret yet."""

    def __init__(self, sock: socket.socket, peer: Tuple[str, int]):
        self.sock = sock
        self.who = "%s:%d" % peer[:2]
        self.host = peer[0]
        self.accepted_at = time.monotonic()
        self.authenticated = False
        self.evicted = False
        self.busy = False  # between reading a request and sending its reply
        self.thread: Optional[threading.Thread] = None


_FD_EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class KVStoreServer:
    """``KVStoreServer(key, host)``; ``port = start()``; ``stop()``.

    ``host`` is the address to listen on: the one the job's peers use (``'0.0.0.0'`` only when the
    user asks for every interface). A new connection must complete the handshake of
    ``horovod_spark.common.wire`` (proving it holds ``key``) within ``handshake_timeout``; until
    then it may send nothing but the few dozen handshake bytes. At most ``max_unauthenticated``
    connections wait in the handshake at once: a newer one pushes the oldest out, so a flood of
    silent connections cannot lock real peers out. ``read_timeout`` bounds reading one request
    frame once its first byte arrived and writing the reply; ``idle_timeout`` closes an
    authenticated connection with no request for that long (clients reconnect). ``max_wait`` caps
    how long one blocking request may hold its connection. ``tls``: a ``wire_tls.ServerTLS`` to
    wrap every connection in TLS (default: ``HOROVOD_SPARK_TLS``).
    """

    def __init__(self, key: bytes, host: str = "0.0.0.0", port: int = 0, *,
                 read_timeout: float = wire.DEFAULT_IO_TIMEOUT, idle_timeout: float = 300.0,
                 max_frame_bytes: int = wire.DEFAULT_MAX_FRAME_BYTES, max_wait: float = 24 * 3600.0,
                 max_connections: int = 4096, handshake_timeout: float = wire.DEFAULT_HANDSHAKE_TIMEOUT,
                 max_unauthenticated: int = 64, tls: Any = "from-env"):
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
        self.handshake_timeout = handshake_timeout
        self.max_unauthenticated = max_unauthenticated
        self.tls = wire_tls.ServerTLS.from_env() if tls == "from-env" else tls

        # One condition guards the store and every subclass's state, so a handler can wait for
        # "all tasks registered" the same way get waits for a key.
        self.condition = threading.Condition()
        self._store: Dict[str, Dict[str, bytes]] = {}
        self._stopping = False

        self._listener: Optional[socket.socket] = None
        self._wake_r: Optional[socket.socket] = None
        self._wake_w: Optional[socket.socket] = None
        self._accept_thread: Optional[threading.Thread] = None
        self._conns: Dict[int, _Connection] = {}
        # Every connection thread until it has ended: a thread removes itself from _conns a few
        # instructions before it returns, and stop() must join those too.
        self._threads: Set[threading.Thread] = set()
        self._conns_lock = threading.Lock()
        self._next_conn_id = 0
        self._last_refusal_log = 0.0
        self._refusals = RateLimitedLog(log, "KV service")

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
        except OSError as exc:
            listener.close()
            raise OSError(exc.errno, "cannot listen on %s:%d: %s (the address must be one of this host's; "
                          "%s=1 listens on every interface)"
                          % (self.host, self._requested_port, exc.strerror, config.BIND_ANY.name)) from exc
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="kv-server-accept:%d" % self.port,
                                               daemon=True)
        self._accept_thread.start()
        log.debug("KV service listening on %s:%d%s", self.host, self.port, " (TLS)" if self.tls else "")
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
            conns = list(self._conns.values())
            busy = [c for c in conns if c.busy]
        # Idle connections are cut at once; requests in flight (a get just released by the
        # notify above) get a moment to send their "stopped" reply, so clients see why.
        for c in conns:
            if not c.busy:
                self._shutdown_socket(c.sock)
        grace_end = time.monotonic() + min(1.0, timeout)
        for c in busy:
            c.thread.join(max(0.0, grace_end - time.monotonic()))
            self._shutdown_socket(c.sock)
        with self._conns_lock:
            threads = set(self._threads) | {c.thread for c in conns}
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            log.warning("KV service: %d connection thread(s) still running after stop(): %s",
                        len(stuck), ", ".join(stuck))
        for s in (self._listener, self._wake_r, self._wake_w):
            if s is not None:
                s.close()
        self._refusals.close()

    @staticmethod
    def _shutdown_socket(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv on it
        except (OSError, ValueError):
            pass

    def __enter__(self):
        if self._listener is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def connection_counts(self) -> Tuple[int, int]:
        """(connections still in the handshake, authenticated connections) open now."""
        with self._conns_lock:
            pending = sum(1 for c in self._conns.values() if not c.authenticated)
            return pending, len(self._conns) - pending

    # -- accepting ------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        """Runs until stop(): no error of one accept or one connection ends it. Out of file
        descriptors, it backs off (the connection waits in the listen backlog) and tries again."""
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, "listen")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        backoff = 0.0
        try:
            while not self._stopping:
                for skey, _ in sel.select(timeout=backoff or None):
                    if skey.data == "wake":
                        return
                if self._stopping:
                    return
                try:
                    self._accept_one()
                    backoff = 0.0
                except OSError as exc:
                    backoff = min(1.0, max(0.05, backoff * 2))
                    if exc.errno in _FD_EXHAUSTED:
                        # The oldest connection still in the handshake gives its descriptor back.
                        self._evict_pending(keep=0, at_most=1)
                        self._log_refusal("KV service: cannot accept a connection: %s; trying again in %.2f s "
                                          "(raise the open-file limit, ulimit -n)", exc, backoff)
                    else:
                        self._log_refusal("KV service: accept failed: %s; trying again in %.2f s", exc, backoff)
                    time.sleep(backoff)  # the listener stays readable: without a pause this would spin
                except Exception:
                    log.exception("KV service: unexpected error accepting a connection; still serving")
                    time.sleep(0.05)
        finally:
            sel.close()

    def _log_refusal(self, fmt: str, *args) -> None:
        # At most one line a second, so a flood cannot flood the log too.
        now = time.monotonic()
        if now - self._last_refusal_log >= 1.0:
            self._last_refusal_log = now
            log.warning(fmt, *args)

    def _accept_one(self) -> None:
        try:
            sock, peer = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(True)
        conn = _Connection(sock, peer)
        with self._conns_lock:
            if self._stopping or len(self._conns) >= self.max_connections:
                self._refusals.warning(conn.host, "refused (stopping or too many connections)",
                                       "KV service: refusing connection from %s (%s)", conn.who,
                                       "stopping" if self._stopping else "%d connections open" % len(self._conns))
                sock.close()
                return
            self._evict_pending_locked(keep=self.max_unauthenticated - 1)
            conn_id = self._next_conn_id
            self._next_conn_id += 1
            conn.thread = threading.Thread(target=self._serve_connection, args=(conn_id, conn),
                                           name="kv-conn:%s" % conn.who, daemon=True)
            self._conns[conn_id] = conn
            self._threads = {t for t in self._threads if t.is_alive()}
            self._threads.add(conn.thread)
        try:
            conn.thread.start()
        except RuntimeError as exc:  # no more threads: treat like running out of descriptors
            with self._conns_lock:
                self._conns.pop(conn_id, None)
            sock.close()
            raise OSError(errno.EAGAIN, "cannot start a connection thread: %s" % exc) from None

    def _evict_pending(self, keep: int, at_most: Optional[int] = None) -> None:
        with self._conns_lock:
            self._evict_pending_locked(keep, at_most)

    def _evict_pending_locked(self, keep: int, at_most: Optional[int] = None) -> None:
        """Cut the oldest connections still in the handshake until ``keep`` remain (at most
        ``at_most`` of them); their threads see the hang-up, log it and close."""
        pending = sorted((c for c in self._conns.values() if not c.authenticated and not c.evicted),
                         key=lambda c: c.accepted_at)
        excess = pending[:max(0, len(pending) - keep)]
        for old in excess[:at_most]:
            old.evicted = True
            self._shutdown_socket(old.sock)

    # -- serving one connection -----------------------------------------------------------------
    def _authenticate(self, conn: _Connection) -> Optional[wire.Session]:
        """The connection's session once it proved it holds the secret; None (logged) otherwise."""
        deadline = time.monotonic() + self.handshake_timeout
        try:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            certificate = None
            if self.tls is not None:
                conn.sock = self.tls.wrap(conn.sock, self.handshake_timeout)
                certificate = self.tls.certificate_der
            session = wire.server_handshake(conn.sock, self._key, max(0.001, deadline - time.monotonic()),
                                            certificate_der=certificate)
        except Exception as exc:  # every failure closes this connection only; see _why_refused
            kind, reason = self._why_refused(conn, exc)
            if reason:
                self._refusals.warning(conn.host, kind, "KV service: %s", reason)
            return None
        with self._conns_lock:
            conn.authenticated = True
        return session

    def _why_refused(self, conn: _Connection, exc: Exception) -> Tuple[str, str]:
        """(the reason's short name, the log line) for a failed handshake; the line is "" when
        nothing needs saying (a clean hang-up)."""
        if conn.evicted:
            return "evicted in the handshake", ("dropped connection from %s: still in the handshake when newer "
                                                "connections needed its place" % conn.who)
        if isinstance(exc, wire.ConnectionClosed) or self._stopping:
            return "", ""
        if isinstance(exc, wire.AuthenticationError):
            return "rejected (wrong secret)", "rejected connection from %s: %s" % (conn.who, exc)
        if isinstance(exc, (TimeoutError, socket.timeout)):
            return "no handshake in time", ("dropped connection from %s: no handshake within %.1f s"
                                            % (conn.who, self.handshake_timeout))
        return ("failed handshake (%s)" % type(exc).__name__,
                "connection from %s failed during the handshake: %s: %s" % (conn.who, type(exc).__name__, exc))

    def _wait_for_request(self, conn: _Connection) -> bool:
        """True when a request's first bytes arrived; False after idle_timeout or on hang-up."""
        pending = getattr(conn.sock, "pending", None)
        if pending is not None and pending():
            return True
        poller = select.poll()
        poller.register(conn.sock.fileno(), select.POLLIN)
        if poller.poll(self.idle_timeout * 1000.0):
            return True
        log.debug("KV service: closing idle connection from %s", conn.who)
        return False

    def _serve_connection(self, conn_id: int, conn: _Connection) -> None:
        who = conn.who
        try:
            session = self._authenticate(conn)
            while session is not None and not self._stopping:
                if not self._wait_for_request(conn):
                    return
                try:
                    payload = session.recv(self.max_frame_bytes, self.read_timeout)
                except wire.ConnectionClosed:
                    return  # clean close between requests
                except wire.ReplayError as exc:
                    self._refusals.warning(conn.host, "replayed frame", "KV service: refused a frame from %s: %s",
                                           who, exc)
                    return
                except wire.AuthenticationError as exc:
                    self._refusals.warning(conn.host, "bad frame MAC", "KV service: rejected connection from %s: %s",
                                           who, exc)
                    return
                except (TimeoutError, socket.timeout):  # distinct types before Python 3.10
                    self._refusals.warning(conn.host, "incomplete frame", "KV service: dropped connection from %s: "
                                           "request frame incomplete after %.0f s", who, self.read_timeout)
                    return
                except OSError as exc:
                    if not self._stopping:
                        log.info("KV service: connection from %s lost: %s", who, exc)
                    return
                with self._conns_lock:
                    conn.busy = True
                try:
                    reply = self._dispatch(payload, who)
                    session.send(reply, self.read_timeout)
                except OSError as exc:
                    if not self._stopping:
                        log.info("KV service: could not reply to %s: %s", who, exc)
                    return
                finally:
                    with self._conns_lock:
                        conn.busy = False
        except Exception:
            log.exception("KV service: unexpected failure serving %s", who)
        finally:
            with self._conns_lock:
                self._conns.pop(conn_id, None)
            try:
                conn.sock.close()
            except OSError:
                pass

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
