"""Authenticated framing for every socket the project opens, and the small message codec on top.

A frame is: 4-byte big-endian payload length, 32-byte HMAC-SHA256(key, payload), payload.
The MAC is checked with ``hmac.compare_digest`` before a single payload byte is handed back, so
callers never deserialise anything an unauthenticated peer sent. The length is capped *before*
reading the body, so a stray connection cannot make us allocate gigabytes.

On top of the framing, ``encode_message``/``decode_message`` carry requests and replies as pickles
restricted to builtin containers and scalars (no ``find_class``): even a peer holding the secret
cannot make the decoder import or call anything. Opaque payloads (cloudpickled functions, results)
travel inside as ``bytes`` and are unpickled explicitly by whoever wants them.
"""
import hashlib
import hmac
import io
import pickle
import secrets
import socket
import struct
import time
from typing import Any, Optional

_HEADER = struct.Struct(">I")
MAC_BYTES = hashlib.sha256().digest_size
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
DEFAULT_IO_TIMEOUT = 30.0

# pickle protocol 4 encodes bytes/str/tuple/dict/list/int/float/bool/None without find_class,
# which is what lets the decoder forbid find_class entirely.
_MESSAGE_PROTOCOL = 4


class AuthenticationError(Exception):
    """A frame failed authentication (bad MAC) or was structurally impossible (oversized length)."""


class FrameTooLargeError(AuthenticationError):
    """A frame announced a payload above the receiver's cap; rejected before reading it."""


class ConnectionClosed(ConnectionError):
    """The peer closed the connection cleanly between frames (not mid-frame)."""


class MessageError(ValueError):
    """An authenticated payload was not a well-formed message (wrong types, forbidden objects)."""


def make_secret() -> bytes:
    """A fresh per-job secret: 32 random bytes from the OS CSPRNG."""
    return secrets.token_bytes(32)


def _check_key(key: bytes) -> bytes:
    if not isinstance(key, (bytes, bytearray)) or not key:
        raise TypeError("the wire key must be non-empty bytes (use bytes.fromhex on HOROVOD_SECRET_KEY)")
    return bytes(key)


def _mac(key: bytes, payload) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()


def send_frame(sock: socket.socket, key: bytes, payload: bytes,
               timeout: Optional[float] = DEFAULT_IO_TIMEOUT) -> None:
    """Send one authenticated frame; ``timeout`` bounds the whole send (None keeps the socket's)."""
    key = _check_key(key)
    if len(payload) > 0xFFFFFFFF:
        raise ValueError("frame payload of %d bytes exceeds the 4 GiB wire limit" % len(payload))
    if timeout is not None:
        sock.settimeout(timeout)
    # One sendall of header+MAC keeps small frames in one segment; large payloads go separately to
    # avoid copying them.
    head = _HEADER.pack(len(payload)) + _mac(key, payload)
    if len(payload) <= 64 * 1024:
        sock.sendall(head + payload)
    else:
        sock.sendall(head)
        sock.sendall(payload)


def _recv_exact(sock: socket.socket, n: int, deadline: Optional[float], what: str,
                at_boundary: bool = False) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("timed out reading %s (%d of %d bytes)" % (what, got, n))
            sock.settimeout(remaining)
        r = sock.recv_into(view[got:], n - got)
        if r == 0:
            if at_boundary and got == 0:
                raise ConnectionClosed("peer closed the connection")
            raise ConnectionError("connection closed mid-frame while reading %s (%d of %d bytes)"
                                  % (what, got, n))
        got += r
    return buf


def recv_frame(sock: socket.socket, key: bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES,
               timeout: Optional[float] = DEFAULT_IO_TIMEOUT) -> bytes:
    """Read one frame and return its payload only if its MAC verifies.

    ``timeout`` bounds the whole frame (a trickling peer cannot hold us longer); None falls back to
    the socket's own timeout. Raises ``FrameTooLargeError`` (announced length above ``max_bytes``),
    ``AuthenticationError`` (bad MAC), ``ConnectionClosed`` (clean EOF before the frame),
    ``ConnectionError`` (EOF mid-frame) or ``TimeoutError``.
    """
    key = _check_key(key)
    deadline = None if timeout is None else time.monotonic() + timeout
    (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline, "frame header", True))
    if length > max_bytes:
        raise FrameTooLargeError("frame announces %d bytes, above the cap of %d" % (length, max_bytes))
    body = _recv_exact(sock, MAC_BYTES + length, deadline, "frame body")
    mac, payload = bytes(body[:MAC_BYTES]), bytes(body[MAC_BYTES:])
    if not hmac.compare_digest(mac, _mac(key, payload)):
        raise AuthenticationError("frame MAC does not verify (wrong secret or corrupted frame)")
    return payload


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise MessageError("message refers to %s.%s; only builtin containers and scalars are allowed"
                           % (module, name))


_ALLOWED_SCALARS = (str, bytes, int, float, bool, type(None))


def _check_plain(obj: Any, depth: int = 0) -> None:
    # The decoder cannot build anything else; checking on encode gives the sender the clear error.
    if depth > 32:
        raise MessageError("message nests deeper than 32 levels")
    if isinstance(obj, _ALLOWED_SCALARS):
        return
    if isinstance(obj, (tuple, list)):
        for item in obj:
            _check_plain(item, depth + 1)
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_plain(k, depth + 1)
            _check_plain(v, depth + 1)
        return
    raise MessageError("cannot put a %s in a wire message; send it as bytes (e.g. cloudpickled)"
                       % type(obj).__name__)


def encode_message(obj: Any) -> bytes:
    """Serialise a tree of tuple/list/dict/str/bytes/int/float/bool/None."""
    _check_plain(obj)
    return pickle.dumps(obj, protocol=_MESSAGE_PROTOCOL)


def decode_message(payload: bytes) -> Any:
    """Inverse of ``encode_message``; refuses any pickle that would import or call something."""
    try:
        return _NoGlobalsUnpickler(io.BytesIO(payload)).load()
    except MessageError:
        raise
    except Exception as exc:  # truncated/garbled pickles raise a zoo of types
        raise MessageError("malformed message: %s" % exc) from None


def send_message(sock: socket.socket, key: bytes, obj: Any,
                 timeout: Optional[float] = DEFAULT_IO_TIMEOUT) -> None:
    send_frame(sock, key, encode_message(obj), timeout)


def recv_message(sock: socket.socket, key: bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 timeout: Optional[float] = DEFAULT_IO_TIMEOUT) -> Any:
    return decode_message(recv_frame(sock, key, max_bytes, timeout))
