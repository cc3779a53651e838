"""Authenticated framing, the KV service and its client: behaviour and the refusal of bad input."""
import hashlib
import hmac
import os
import pickle
import random
import socket
import struct
import threading
import time

import pytest

from horovod_spark.common import wire
from horovod_spark.common.kv_client import KVClient, KVError
from horovod_spark.common.kv_server import KVStoreServer

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def secret():
    return wire.make_secret()


@pytest.fixture
def server(secret):
    srv = KVStoreServer(secret, host="127.0.0.1", read_timeout=5.0)
    srv.start()
    yield srv
    srv.stop()


def client_of(server, key):
    return KVClient("127.0.0.1", server.port, key)


class _CreatesMarker:
    """Unpickling this creates a file: proof of deserialisation if the file ever appears."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _session_pair(client_key: bytes, server_key: bytes):
    """A client and a server session over a socketpair (the server's handshake on a thread)."""
    a, b = socket.socketpair()
    outcome = {}

    def serve():
        try:
            outcome["server"] = wire.server_handshake(b, server_key, timeout=5)
        except Exception as exc:
            outcome["server"] = exc

    t = threading.Thread(target=serve)
    t.start()
    try:
        client = wire.client_handshake(a, client_key, timeout=5)
    except Exception as exc:
        client = exc
    t.join(10)
    return client, outcome["server"], (a, b)


def _authenticated_socket(port: int, key: bytes) -> wire.Session:
    return wire.client_handshake(socket.create_connection(("127.0.0.1", port), timeout=5), key, timeout=5)


def _closed_by_peer(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


# -- framing -----------------------------------------------------------------------------------

def test_make_secret_is_32_fresh_bytes():
    a, b = wire.make_secret(), wire.make_secret()
    assert isinstance(a, bytes) and len(a) == 32 and a != b


def test_frame_roundtrip_and_rejections(secret):
    client, server, socks = _session_pair(secret, secret)
    with socks[0], socks[1]:
        client.send(b"hello")
        assert server.recv() == b"hello"
        server.send(b"reply")
        assert client.recv() == b"reply"

        # A frame made under another session key fails its MAC.
        other, _, other_socks = _session_pair(secret, secret)
        with other_socks[0], other_socks[1]:
            other.sock = socks[0]
            other.send(b"hello")
        with pytest.raises(wire.AuthenticationError, match="MAC"):
            server.recv()

    # The body of an oversized frame is never waited for: only the header was sent.
    client, server, socks = _session_pair(secret, secret)
    with socks[0], socks[1]:
        socks[0].sendall(struct.pack(">IQ", 1025, 0) + b"\0" * 32)
        with pytest.raises(wire.FrameTooLargeError):
            server.recv(max_bytes=1024, timeout=5.0)

    client, server, socks = _session_pair(secret, secret)
    with socks[0], socks[1]:
        socks[0].sendall(struct.pack(">IQ", 100, 0) + b"\0" * 32 + b"x" * 10)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            server.recv(timeout=0.3)
        assert time.monotonic() - t0 < 2.0

    client, server, socks = _session_pair(secret, secret)
    with socks[1]:
        socks[0].sendall(struct.pack(">IQ", 100, 0) + b"\0" * 32 + b"x" * 10)
        socks[0].close()
        with pytest.raises(ConnectionError, match="mid-frame"):
            server.recv()


def test_handshake_refuses_a_peer_without_the_secret(secret):
    client, server, socks = _session_pair(b"not the secret", secret)
    with socks[0], socks[1]:
        assert isinstance(client, wire.AuthenticationError) and "prove" in str(client)
    # The server side of a wrong-key client: the client's proof does not verify.
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"HSW2" + os.urandom(16))
        threading.Timer(0.2, lambda: a.sendall(os.urandom(32))).start()
        with pytest.raises(wire.AuthenticationError, match="did not prove"):
            wire.server_handshake(b, secret, timeout=5)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">I", 60 * 1024 * 1024) + os.urandom(40))
        with pytest.raises(wire.AuthenticationError, match="not a horovod_spark handshake"):
            wire.server_handshake(b, secret, timeout=5)


def test_message_decoder_refuses_globals_even_when_authenticated(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_CreatesMarker(str(marker)))
    with pytest.raises(wire.MessageError):
        wire.decode_message(evil)
    assert not marker.exists()
    with pytest.raises(wire.MessageError):
        wire.encode_message(("put", object()))
    msg = ("op", 1, 2.5, None, True, b"\x00raw", ["a", {"k": (b"v",)}])
    assert wire.decode_message(wire.encode_message(msg)) == msg


# -- KV service ----------------------------------------------------------------------------------

def test_put_get_across_clients(server, secret):
    with client_of(server, secret) as a, client_of(server, secret) as b:
        a.put("job1", "addr.0", b"10.0.0.1:1234")
        assert b.get("job1", "addr.0", timeout=1) == b"10.0.0.1:1234"
        a.put("job1", "empty", b"")
        assert b.get("job1", "empty", timeout=1) == b""
        # Scopes are separate namespaces.
        with pytest.raises(TimeoutError):
            b.get("job2", "addr.0", timeout=0.2)

        threading.Timer(0.3, lambda: KVClient("127.0.0.1", server.port, secret).put("job1", "late", b"x")).start()
        t0 = time.monotonic()
        assert b.get_many("job1", ["addr.0", "late"], timeout=10) == {"addr.0": b"10.0.0.1:1234", "late": b"x"}
        assert 0.2 < time.monotonic() - t0 < 5

        big = os.urandom(40 * 1024 * 1024)
        a.put_blob("job1", "blob", big)
        assert b.get_blob("job1", "blob", timeout=5) == big

        assert a.delete_scope("job1") > 0
        with pytest.raises(TimeoutError):
            b.get("job1", "addr.0", timeout=0.1)


def test_get_timeout_names_scope_and_key(server, secret):
    with client_of(server, secret) as c:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            c.get("my-scope", "my-key", timeout=0.5)
        assert 0.4 < time.monotonic() - t0 < 5
        assert "my-scope" in str(info.value) and "my-key" in str(info.value)
        with pytest.raises(TimeoutError, match="2 of 3 KV keys in scope 's'"):
            c.put("s", "a", b"1")
            c.get_many("s", ["a", "b", "c"], timeout=0.2)


def test_wrong_key_frame_rejected_before_unpickling(server, secret, tmp_path, caplog):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(("put", "s", "k", _CreatesMarker(str(marker))))
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        with pytest.raises(wire.AuthenticationError):
            wire.client_handshake(s, b"wrong key", timeout=5)
        s.sendall(struct.pack(">IQ", len(evil), 0) + hmac.new(b"wrong key", evil, hashlib.sha256).digest() + evil)
        assert _closed_by_peer(s, within=5)
    assert not marker.exists()
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"HSW2" + os.urandom(16) + b"\0" * 32)
        assert _closed_by_peer(s, within=5)
    rejected = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert rejected and all(r.exc_info is None for r in rejected)  # one line, no traceback

    # With the right key the frame is accepted, but the decoder still refuses to build anything.
    session = _authenticated_socket(server.port, secret)
    with session.sock:
        session.send(evil)
        reply = session.recv_message(timeout=5)
    assert reply[:2] == ("err", "bad_request")
    assert not marker.exists()

    with client_of(server, secret) as c:
        c.put("s", "k", b"still works")
        assert c.get("s", "k", timeout=1) == b"still works"


def test_random_bytes_and_wrong_key_client_rejected(server, secret):
    rng = random.Random(1234)
    for n in (3, 40, 4096):
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            try:
                s.sendall(bytes(rng.getrandbits(8) for _ in range(n)))
                s.shutdown(socket.SHUT_WR)  # ends a short "frame" so the server sees EOF mid-frame
            except OSError:
                pass  # the server already refused the header and reset the connection
            assert _closed_by_peer(s, within=5)
    with pytest.raises(KVError, match="prove"):
        KVClient("127.0.0.1", server.port, b"not the secret").put("s", "k", b"v")
    with client_of(server, secret) as c:
        c.put("s", "k", b"v")
        assert c.get("s", "k", timeout=1) == b"v"


def test_oversized_length_rejected_without_reading_body(secret):
    with KVStoreServer(secret, host="127.0.0.1", read_timeout=20.0, max_frame_bytes=1024) as srv:
        # Before the handshake nothing but its fixed bytes is read: a length is just a bad greeting.
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(struct.pack(">I", wire.DEFAULT_MAX_FRAME_BYTES - 1) + b"\0" * 16)
            assert _closed_by_peer(s, within=3)
        # After it, an announced length above the cap is refused at once (not after read_timeout).
        session = _authenticated_socket(srv.port, secret)
        with session.sock as s:
            s.sendall(struct.pack(">IQ", 1025, 0))
            assert _closed_by_peer(s, within=3)
        with KVClient("127.0.0.1", srv.port, secret) as c:
            with pytest.raises(ConnectionError):
                c.put("s", "k", b"x" * 2048)
            c.put("s", "k", b"small")
            assert c.get("s", "k", timeout=1) == b"small"


def test_stalled_peer_does_not_block_others(secret):
    with KVStoreServer(secret, host="127.0.0.1", read_timeout=0.5, handshake_timeout=0.5) as srv:
        with socket.create_connection(("127.0.0.1", srv.port)) as stalled:
            stalled.sendall(b"HSW2")  # starts a handshake it never finishes
            with KVClient("127.0.0.1", srv.port, secret) as c:
                c.put("s", "k", b"v")
                assert c.get("s", "k", timeout=1) == b"v"
            assert _closed_by_peer(stalled, within=5)


def test_client_reconnects_after_server_closes_idle_connection(secret):
    with KVStoreServer(secret, host="127.0.0.1", idle_timeout=0.2) as srv:
        with KVClient("127.0.0.1", srv.port, secret) as c:
            c.put("s", "k", b"1")
            time.sleep(0.5)  # the server drops the idle connection meanwhile
            assert c.get("s", "k", timeout=1) == b"1"


def test_custom_handler_and_stop_releases_waiters(secret):
    srv = KVStoreServer(secret, host="127.0.0.1")
    registered = []

    def register(task_id, host):
        with srv.condition:
            registered.append((task_id, host))
            srv.condition.notify_all()
        return len(registered)

    srv.add_handler("register", register)
    srv.start()
    c = KVClient("127.0.0.1", srv.port, secret)
    assert c.request("register", 3, "hostA") == 1
    with pytest.raises(KVError, match="unknown op"):
        c.request("no-such-op")
    with pytest.raises(KVError, match="bad arguments"):
        c.request("register", 1)

    outcome = {}

    def blocked_get():
        try:
            KVClient("127.0.0.1", srv.port, secret).get("s", "never", timeout=60)
        except Exception as exc:
            outcome["exc"] = exc

    t = threading.Thread(target=blocked_get)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    srv.stop()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 5
    assert isinstance(outcome["exc"], KVError) and "stopped" in str(outcome["exc"])
    c.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("kv-")]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()


def test_init_rendezvous_reports_waiting_and_fails_on_a_rank_that_ended(server, secret, monkeypatch, caplog):
    """hvd.init()'s wait for the other ranks: it says whom it waits for, and a rank the launcher
    reports as ended makes it fail at once instead of after HOROVOD_START_TIMEOUT."""
    from horovod_spark.common import rendezvous

    monkeypatch.setattr(rendezvous, "_WAIT_SLICE_S", 0.2)
    monkeypatch.setattr(rendezvous, "_WAIT_NOTE_S", 0.5)
    ident = rendezvous.Identity(0, 3, "env")
    client = KVClient("127.0.0.1", server.port, secret)
    client.put("job.init.0", "rank.0", b"r0")
    client.put("job.init.0", "rank.2", b"r2")
    threading.Timer(1.5, rendezvous.note_rank_exit, args=(server, "job", 1, 0)).start()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 \(exit code 0\) ended without calling hvd.init\(\)"):
        rendezvous._wait_for_ranks(client, "job.init.0", "job", ident, timeout=60)
    assert time.monotonic() - start < 5
    assert any(r.name == "horovod_spark.common.rendezvous" and "still waiting for ranks [1]" in r.getMessage()
               for r in caplog.records), caplog.text
    # A rank that ended after putting its record does not count: it did take part.
    rendezvous.note_rank_exit(server, "job", 2, 0)
    client.put("job.init.0", "rank.1", b"r1")
    assert rendezvous._wait_for_ranks(client, "job.init.0", "job", ident, timeout=5) == {
        "rank.0": b"r0", "rank.1": b"r1", "rank.2": b"r2"}
    # Nobody arrives and nobody ended: the timeout names the missing ranks.
    client.put("job.init.1", "rank.0", b"r0")
    with pytest.raises(TimeoutError, match=r"waited 0.5 s for all 3 ranks to start; ranks \[1, 2\] never arrived"):
        rendezvous._wait_for_ranks(client, "job.init.1", "other", rendezvous.Identity(0, 3, "env"), timeout=0.5)
    client.close()
