"""Property-based fuzzing of the frame parser, the handshake and the message decoder: random,
truncated and oversized input only ever raises our own clear errors, and never makes the parser
allocate more than the bytes that really arrived."""
import socket
import struct
import threading
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from horovod_spark.common import wire

pytestmark = pytest.mark.timeout(300)

SECRET = b"s" * 32
# What the parser may raise on bad input: our authentication errors, or the connection ending.
PARSER_ERRORS = (wire.AuthenticationError, ConnectionError, TimeoutError)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sessions():
    a, b = socket.socketpair()
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("server", wire.server_handshake(b, SECRET, timeout=5)))
    t.start()
    client = wire.client_handshake(a, SECRET, timeout=5)
    t.join(5)
    return client, done["server"]


def _feed(data: bytes, max_bytes: int = wire.DEFAULT_MAX_FRAME_BYTES):
    """Parse ``data`` (then end of stream) as frames arriving at an authenticated server; returns
    the payloads accepted before the error, the error, and the parser's peak allocation."""
    client, server = _sessions()
    with client.sock, server.sock:
        writer = threading.Thread(target=lambda: (client.sock.sendall(data), client.sock.shutdown(socket.SHUT_WR)))
        writer.start()
        payloads = []
        tracemalloc.start()
        try:
            while True:
                payloads.append(server.recv(max_bytes, timeout=5))
        except Exception as exc:  # returned to the caller for its checks
            error = exc
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        writer.join(5)
    return payloads, error, peak


@FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes_after_the_handshake(data):
    payloads, error, peak = _feed(data)
    assert isinstance(error, PARSER_ERRORS), repr(error)
    assert payloads == []  # nothing unauthenticated is ever handed back
    assert peak < 64 * 1024 + 4 * len(data)


@FUZZ
@given(length=st.integers(0, 2 ** 32 - 1), seq=st.integers(0, 2 ** 64 - 1), body=st.binary(max_size=2048))
def test_oversized_or_lying_lengths_never_over_allocate(length, seq, body):
    data = struct.pack(">IQ", length, seq) + body
    payloads, error, peak = _feed(data, max_bytes=1 << 20)
    assert isinstance(error, PARSER_ERRORS), repr(error)
    if length > 1 << 20:
        assert isinstance(error, wire.FrameTooLargeError) and "above the cap" in str(error)
    assert payloads == []
    assert peak < 64 * 1024 + 4 * len(data)


def _read_all(sock) -> bytes:
    sock.settimeout(5)
    data = b""
    while True:
        piece = sock.recv(65536)
        if not piece:
            return data
        data += piece


def _real_frames_altered(payloads, alter):
    """A real client session writes ``payloads``; the bytes it wrote are captured, passed through
    ``alter`` and delivered to the real server session. Returns what the server accepted and the
    error that ended its reading."""
    client, server = _sessions()
    capture_in, capture_out = socket.socketpair()
    with client.sock, server.sock, capture_in, capture_out:
        wire_end = client.sock
        client.sock = capture_in
        for p in payloads:
            client.send(p)
        capture_in.shutdown(socket.SHUT_WR)
        wire_end.sendall(alter(_read_all(capture_out)))
        wire_end.shutdown(socket.SHUT_WR)
        accepted = []
        try:
            while True:
                accepted.append(server.recv(timeout=5))
        except Exception as exc:  # returned to the caller for its checks
            return accepted, exc


@FUZZ
@given(payloads=st.lists(st.binary(max_size=512), min_size=1, max_size=4), where=st.integers(0, 10 ** 6))
def test_truncated_or_corrupted_real_frames(payloads, where):
    accepted, error = _real_frames_altered(payloads, lambda data: data)
    assert accepted == payloads and isinstance(error, wire.ConnectionClosed)
    # Cut short: the whole frames before the cut come back, then a clear error.
    accepted, error = _real_frames_altered(payloads, lambda data: data[:where % len(data)])
    assert accepted == payloads[:len(accepted)] and len(accepted) < len(payloads)
    assert isinstance(error, PARSER_ERRORS)

    # One bit flipped: refused no later than the frame it is in, never handed back altered.
    def flip(data):
        i = where % len(data)
        return data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]
    accepted, error = _real_frames_altered(payloads, flip)
    assert accepted == payloads[:len(accepted)] and len(accepted) < len(payloads)
    assert isinstance(error, PARSER_ERRORS)


@FUZZ
@given(st.binary(max_size=200))
def test_random_handshakes_are_refused(data):
    a, b = socket.socketpair()
    with a, b:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(PARSER_ERRORS):
            wire.server_handshake(b, SECRET, timeout=5)


@FUZZ
@given(st.binary(max_size=2048))
def test_decoder_only_raises_message_error(data):
    try:
        wire.decode_message(data)
    except wire.MessageError:
        pass
