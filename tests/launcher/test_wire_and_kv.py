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


def _raw_frame(key: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + hmac.new(key, payload, hashlib.sha256).digest() + payload


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
    a, b = socket.socketpair()
    with a, b:
        wire.send_frame(a, secret, b"hello")
        assert wire.recv_frame(b, secret) == b"hello"

        wire.send_frame(a, b"another key", b"hello")
        with pytest.raises(wire.AuthenticationError, match="MAC"):
            wire.recv_frame(b, secret)

        # The body of an oversized frame is never waited for: only the header was sent.
        a.sendall(struct.pack(">I", 1025))
        with pytest.raises(wire.FrameTooLargeError):
            wire.recv_frame(b, secret, max_bytes=1024, timeout=5.0)

        a.sendall(struct.pack(">I", 100) + b"x" * 10)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            wire.recv_frame(b, secret, timeout=0.3)
        assert time.monotonic() - t0 < 2.0

    c, d = socket.socketpair()
    with d:
        c.sendall(struct.pack(">I", 100) + b"x" * 10)
        c.close()
        with pytest.raises(ConnectionError, match="mid-frame"):
            wire.recv_frame(d, secret)


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
        s.sendall(_raw_frame(b"wrong key", evil))
        assert _closed_by_peer(s, within=5)
    assert not marker.exists()
    rejected = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert rejected and all(r.exc_info is None for r in rejected)  # one line, no traceback

    # With the right key the frame is accepted, but the decoder still refuses to build anything.
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(_raw_frame(secret, evil))
        reply = wire.recv_message(s, secret, timeout=5)
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
    with pytest.raises((ConnectionError, KVError)):
        KVClient("127.0.0.1", server.port, b"not the secret").put("s", "k", b"v")
    with client_of(server, secret) as c:
        c.put("s", "k", b"v")
        assert c.get("s", "k", timeout=1) == b"v"


def test_oversized_length_rejected_without_reading_body(secret):
    with KVStoreServer(secret, host="127.0.0.1", read_timeout=20.0, max_frame_bytes=1024) as srv:
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(struct.pack(">I", 1025))
            # Closed at once (not after read_timeout): the announced length alone was refused.
            assert _closed_by_peer(s, within=3)
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(struct.pack(">I", wire.DEFAULT_MAX_FRAME_BYTES + 1))
            assert _closed_by_peer(s, within=3)
        with KVClient("127.0.0.1", srv.port, secret) as c:
            with pytest.raises(ConnectionError):
                c.put("s", "k", b"x" * 2048)
            c.put("s", "k", b"small")
            assert c.get("s", "k", timeout=1) == b"small"


def test_stalled_peer_does_not_block_others(secret):
    with KVStoreServer(secret, host="127.0.0.1", read_timeout=0.5) as srv:
        with socket.create_connection(("127.0.0.1", srv.port)) as stalled:
            stalled.sendall(struct.pack(">I", 100))  # promises a body that never comes
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


def test_init_rendezvous_reports_waiting_and_fails_on_a_rank_that_ended(server, secret, monkeypatch, capsys):
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
    assert "still waiting for ranks [1]" in capsys.readouterr().err
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
