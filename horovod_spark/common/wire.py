"""Authenticated, replay-proof framing for every socket the project opens, and the message codec.

A connection starts with a handshake that proves both ends hold the job's secret without sending
it, before either side accepts anything larger than the handshake itself (a few dozen bytes):

  client -> server  HELLO  = b"HSW2" + client nonce (16 bytes)
  server -> client  CHALL  = b"HSW2" + server nonce (16) + HMAC(secret, "server" | both nonces | binding)
  client -> server  PROOF  = HMAC(secret, "client" | both nonces | binding)

``binding`` is the SHA-256 of the server's TLS certificate when the connection is TLS (so a
man in the middle holding another certificate cannot relay the handshake), else empty. Both ends
then derive a per-connection session key, HMAC(secret, "session" | both nonces), and every frame is:

  4-byte big-endian payload length, 8-byte sequence number,
  32-byte HMAC-SHA256(session key, direction | sequence | length | payload), payload.

Sequence numbers count frames per direction from 0; a frame whose MAC verifies but whose sequence
number is not the next one is a replay or reordering and is refused, and a frame from another
connection (or another direction) fails its MAC. The length is capped before the body is read,
and the body buffer grows only as bytes really arrive, so a peer cannot make us allocate what it
does not send.

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

_MAGIC = b"HSW2"
NONCE_BYTES = 16
MAC_BYTES = hashlib.sha256().digest_size
HELLO_BYTES = len(_MAGIC) + NONCE_BYTES
CHALLENGE_BYTES = len(_MAGIC) + NONCE_BYTES + MAC_BYTES
PROOF_BYTES = MAC_BYTES
_HEADER = struct.Struct(">IQ")  # payload length, sequence number
HEADER_BYTES = _HEADER.size + MAC_BYTES
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
DEFAULT_IO_TIMEOUT = 30.0
# How long a server gives a new connection to complete the handshake.
DEFAULT_HANDSHAKE_TIMEOUT = 5.0
# Bodies above this are read in pieces of this size, so memory follows the bytes that arrived.
_READ_PIECE = 1 << 20

# pickle protocol 4 encodes bytes/str/tuple/dict/list/int/float/bool/None without find_class,
# which is what lets the decoder forbid find_class entirely.
_MESSAGE_PROTOCOL = 4


class AuthenticationError(Exception):
    """A peer failed the handshake, a frame failed its MAC, or a frame was structurally impossible."""


class FrameTooLargeError(AuthenticationError):
    """A frame announced a payload above the receiver's cap; rejected before reading it."""


class ReplayError(AuthenticationError):
    """A frame with a valid MAC arrived out of sequence: a replayed or reordered frame."""


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


def _mac(key: bytes, *parts) -> bytes:
    h = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        h.update(part)
    return h.digest()


def _recv_exact(sock: socket.socket, n: int, deadline: Optional[float], what: str,
                at_boundary: bool = False) -> bytes:
    pieces = []
    got = 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("timed out reading %s (%d of %d bytes)" % (what, got, n))
            sock.settimeout(remaining)
        piece = sock.recv(min(n - got, _READ_PIECE))
        if not piece:
            if at_boundary and got == 0:
                raise ConnectionClosed("peer closed the connection")
            raise ConnectionError("connection closed mid-frame while reading %s (%d of %d bytes)"
                                  % (what, got, n))
        pieces.append(piece)
        got += len(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


def _send(sock: socket.socket, data: bytes, timeout: Optional[float]) -> None:
    if timeout is not None:
        sock.settimeout(timeout)
    sock.sendall(data)


def _server_certificate_hash(sock: socket.socket) -> bytes:
    """On a TLS client socket, the SHA-256 of the certificate the server showed; empty on plain TCP."""
    getpeercert = getattr(sock, "getpeercert", None)
    if getpeercert is None:
        return b""
    return hashlib.sha256(getpeercert(binary_form=True) or b"").digest()


class Session:
    """One authenticated connection: ``send``/``recv`` frames, ``send_message``/``recv_message``.

    Made by ``client_handshake`` or ``server_handshake``; not for use by two threads at once.
    """

    def __init__(self, sock: socket.socket, key: bytes, server_side: bool):
        self.sock = sock
        self._key = key
        self._out_dir, self._in_dir = (b"S", b"C") if server_side else (b"C", b"S")
        self._sent = 0
        self._received = 0

    def send(self, payload: bytes, timeout: Optional[float] = DEFAULT_IO_TIMEOUT) -> None:
        """Send one frame; ``timeout`` bounds the whole send (None keeps the socket's)."""
        if len(payload) > 0xFFFFFFFF:
            raise ValueError("frame payload of %d bytes exceeds the 4 GiB wire limit" % len(payload))
        fields = _HEADER.pack(len(payload), self._sent)
        head = fields + _mac(self._key, self._out_dir, fields, payload)
        self._sent += 1
        # One sendall keeps small frames in one segment; large payloads go separately, uncopied.
        if len(payload) <= 64 * 1024:
            _send(self.sock, head + payload, timeout)
        else:
            _send(self.sock, head, timeout)
            self.sock.sendall(payload)

    def recv(self, max_bytes: int = DEFAULT_MAX_FRAME_BYTES,
             timeout: Optional[float] = DEFAULT_IO_TIMEOUT) -> bytes:
        """Read one frame and return its payload only if its MAC and sequence number verify.

        ``timeout`` bounds the whole frame (a trickling peer cannot hold us longer). Raises
        ``FrameTooLargeError``, ``AuthenticationError`` (bad MAC), ``ReplayError`` (out of sequence),
        ``ConnectionClosed`` (clean EOF before the frame), ``ConnectionError`` (EOF mid-frame) or
        ``TimeoutError``.
        """
        deadline = _deadline(timeout)
        fields = _recv_exact(self.sock, _HEADER.size, deadline, "frame header", True)
        length, seq = _HEADER.unpack(fields)
        if length > max_bytes:
            raise FrameTooLargeError("frame announces %d bytes, above the cap of %d" % (length, max_bytes))
        mac = _recv_exact(self.sock, MAC_BYTES, deadline, "frame MAC")
        payload = _recv_exact(self.sock, length, deadline, "frame body")
        if not hmac.compare_digest(mac, _mac(self._key, self._in_dir, fields, payload)):
            raise AuthenticationError("frame MAC does not verify (a frame of another connection, a wrong "
                                      "secret, or a corrupted frame)")
        if seq != self._received:
            raise ReplayError("frame out of sequence: number %d where %d was due (a replayed or "
                              "reordered frame)" % (seq, self._received))
        self._received += 1
        return payload

    def send_message(self, obj: Any, timeout: Optional[float] = DEFAULT_IO_TIMEOUT) -> None:
        self.send(encode_message(obj), timeout)

    def recv_message(self, max_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                     timeout: Optional[float] = DEFAULT_IO_TIMEOUT) -> Any:
        return decode_message(self.recv(max_bytes, timeout))


def _session_key(key: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return _mac(key, b"session", client_nonce, server_nonce)


def client_handshake(sock: socket.socket, key: bytes, timeout: Optional[float] = DEFAULT_IO_TIMEOUT) -> Session:
    """Prove to the server that we hold ``key``, check that it does too, and return the session."""
    key = _check_key(key)
    deadline = _deadline(timeout)
    client_nonce = secrets.token_bytes(NONCE_BYTES)
    _send(sock, _MAGIC + client_nonce, timeout)
    challenge = _recv_exact(sock, CHALLENGE_BYTES, deadline, "the service's handshake")
    if challenge[:len(_MAGIC)] != _MAGIC:
        raise AuthenticationError("the peer is not a horovod_spark service of this version "
                                  "(its handshake starts %r)" % challenge[:len(_MAGIC)])
    server_nonce = challenge[len(_MAGIC):len(_MAGIC) + NONCE_BYTES]
    binding = _server_certificate_hash(sock)
    expected = _mac(key, b"server", client_nonce, server_nonce, binding)
    if not hmac.compare_digest(challenge[len(_MAGIC) + NONCE_BYTES:], expected):
        raise AuthenticationError("the service did not prove it holds the job's secret (another job's "
                                  "service on this port, or a man in the middle)")
    _send(sock, _mac(key, b"client", client_nonce, server_nonce, binding), timeout)
    return Session(sock, _session_key(key, client_nonce, server_nonce), server_side=False)


def server_handshake(sock: socket.socket, key: bytes, timeout: Optional[float] = DEFAULT_HANDSHAKE_TIMEOUT,
                     certificate_der: Optional[bytes] = None) -> Session:
    """Read the fixed-size handshake within ``timeout`` and return the session, or raise
    ``AuthenticationError`` (wrong secret, not our protocol) or ``TimeoutError`` (too slow).
    ``certificate_der``: the server's own certificate when ``sock`` is TLS."""
    key = _check_key(key)
    deadline = _deadline(timeout)
    hello = _recv_exact(sock, HELLO_BYTES, deadline, "the client's handshake", True)
    if hello[:len(_MAGIC)] != _MAGIC:
        raise AuthenticationError("not a horovod_spark handshake (first bytes %r)" % hello[:len(_MAGIC)])
    client_nonce = hello[len(_MAGIC):]
    server_nonce = secrets.token_bytes(NONCE_BYTES)
    binding = b"" if certificate_der is None else hashlib.sha256(certificate_der).digest()
    _send(sock, _MAGIC + server_nonce + _mac(key, b"server", client_nonce, server_nonce, binding),
          None if deadline is None else max(0.001, deadline - time.monotonic()))
    proof = _recv_exact(sock, PROOF_BYTES, deadline, "the client's proof of the secret")
    if not hmac.compare_digest(proof, _mac(key, b"client", client_nonce, server_nonce, binding)):
        raise AuthenticationError("the client did not prove it holds the job's secret")
    return Session(sock, _session_key(key, client_nonce, server_nonce), server_side=True)


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
