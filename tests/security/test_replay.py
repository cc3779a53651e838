"""A frame captured from a real client's connection to the KV service cannot be used again: not
on the same connection (replayed or reordered), not on a new one (the handshake differs), and not
on another authenticated connection (another session key). Each refusal is logged."""
import logging
import socket
import time

import pytest
from support.tcp_relay import TcpRelay

from horovod_spark.common import wire
from horovod_spark.common.kv_client import KVClient
from horovod_spark.common.kv_server import KVStoreServer

pytestmark = pytest.mark.timeout(60)


class RecordingProxy(TcpRelay):
    """A relay between clients and the service that records what each client sent; a test injects
    bytes into a client's stream toward the service through ``upstream``: a man in the middle
    without the secret."""

    def __init__(self, target_port: int):
        self.sent = []  # per connection: bytes the client sent
        super().__init__(target_port)

    def on_connection(self, index):
        self.sent.append(bytearray())

    def on_chunk(self, index, from_connector, chunk, seen):
        if from_connector:
            self.sent[index] += chunk
        return chunk


def _frames(stream: bytes):
    """Split what a client sent after its handshake into whole frames."""
    at = wire.HELLO_BYTES + wire.PROOF_BYTES
    frames = []
    while at < len(stream):
        length = int.from_bytes(stream[at:at + 4], "big")
        end = at + wire.HEADER_BYTES + length
        frames.append(bytes(stream[at:end]))
        at = end
    return frames


def _wait_for(predicate, within=5.0):
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def service():
    key = wire.make_secret()
    srv = KVStoreServer(key, host="127.0.0.1", tls=None)
    srv.start()
    proxy = RecordingProxy(srv.port)
    yield srv, key, proxy
    proxy.close()
    srv.stop()


def test_replayed_frame_on_the_same_connection_is_refused_and_logged(service, caplog):
    srv, key, proxy = service
    client = KVClient("127.0.0.1", proxy.port, key, tls=False)
    client.put("s", "k", b"first")
    client.put("s", "k", b"second")
    assert _wait_for(lambda: len(_frames(proxy.sent[0])) == 2)
    put_first = _frames(proxy.sent[0])[0]
    with caplog.at_level(logging.WARNING, logger="horovod_spark.common.kv_server"):
        proxy.upstream[0].sendall(put_first)  # the man in the middle replays the first put
        assert _wait_for(lambda: any("out of sequence" in r.getMessage() for r in caplog.records))
    assert srv.get_nowait("s", "k") == b"second"  # the replay changed nothing
    refusal = next(r.getMessage() for r in caplog.records if "out of sequence" in r.getMessage())
    assert "number 0 where 2 was due" in refusal and "replayed or reordered" in refusal
    # The service dropped that connection; the client reconnects with a fresh session.
    client.put("s", "k", b"third")
    assert srv.get_nowait("s", "k") == b"third"
    client.close()


def test_reordered_frames_are_refused(service, caplog):
    srv, key, proxy = service
    # Two frames written by a real session, delivered in the wrong order.
    sock = socket.create_connection(("127.0.0.1", srv.port))
    session = wire.client_handshake(sock, key)
    capture_in, capture_out = socket.socketpair()
    session.sock = capture_in
    session.send_message(("put", "s", "k", b"1"))
    session.send_message(("put", "s", "k", b"2"))
    capture_in.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        piece = capture_out.recv(65536)
        if not piece:
            break
        data += piece
    first_len = wire.HEADER_BYTES + int.from_bytes(data[:4], "big")
    with caplog.at_level(logging.WARNING, logger="horovod_spark.common.kv_server"):
        sock.sendall(data[first_len:] + data[:first_len])
        sock.settimeout(5)
        try:
            assert sock.recv(1) == b""  # no reply: the connection is dropped
        except ConnectionResetError:
            pass  # dropped with the second frame still unread
    assert any("number 1 where 0 was due" in r.getMessage() for r in caplog.records)
    assert srv.get_nowait("s", "k") is None
    for s in (sock, capture_in, capture_out):
        s.close()


def test_captured_connection_replayed_on_a_new_connection_is_refused(service, caplog):
    srv, key, proxy = service
    client = KVClient("127.0.0.1", proxy.port, key, tls=False)
    client.put("s", "k", b"real")
    assert _wait_for(lambda: len(_frames(proxy.sent[0])) == 1)
    captured = bytes(proxy.sent[0])  # handshake and the put, byte for byte
    srv.delete_scope("s")
    with caplog.at_level(logging.WARNING, logger="horovod_spark.common.kv_server"):
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(captured)
            s.settimeout(5)
            reply = b""
            try:
                while True:
                    piece = s.recv(4096)
                    if not piece:
                        break
                    reply += piece
            except ConnectionResetError:
                pass  # dropped with the replayed put still unread
    # The service answered the hello with a fresh challenge, and the old proof does not meet it.
    assert len(reply) in (0, wire.CHALLENGE_BYTES)
    assert any("did not prove it holds the job's secret" in r.getMessage() for r in caplog.records)
    assert srv.get_nowait("s", "k") is None
    client.close()


def test_frame_from_another_connection_is_refused(service, caplog):
    srv, key, proxy = service
    victim = KVClient("127.0.0.1", proxy.port, key, tls=False)
    victim.put("s", "k", b"victim")
    assert _wait_for(lambda: len(_frames(proxy.sent[0])) == 1)
    put_victim = _frames(proxy.sent[0])[0]
    srv.delete_scope("s")
    # Another authenticated connection (through the proxy too) carries the victim's frame.
    other = KVClient("127.0.0.1", proxy.port, key, tls=False)
    assert other.request("ping") == "pong"
    with caplog.at_level(logging.WARNING, logger="horovod_spark.common.kv_server"):
        proxy.upstream[1].sendall(put_victim)
        assert _wait_for(lambda: any("another connection" in r.getMessage() for r in caplog.records))
    assert srv.get_nowait("s", "k") is None
    victim.close()
    other.close()
