"""A rank's peer port: silent or hostile connections do not delay hvd.init(), and when the real
peer never proves itself the error says so (not "timed out waiting for shared memory")."""
import hashlib
import hmac
import os
import re
import socket
import struct
import time

import pytest
from support.peer_port import kv_service, pose_as_remote_rank1, record_of, start_rank

pytestmark = pytest.mark.timeout(240)

_GREETING_HEADER = struct.pack(">I", 0x48535033)  # native/transport/peer_wire.h: kMagic


@pytest.fixture
def service():
    with kv_service("peer") as job:
        yield job


def test_silent_and_hostile_peer_connections_do_not_delay_init(service):
    server, key, scope = service
    rank0 = start_rank(0, 2, server, key, scope)
    try:
        port = record_of(server, scope, 0)["port"]
        # Queued on rank 0's peer port before the real peer: silent ones, one that greets and
        # never proves, one with a wrong proof, one announcing a huge frame.
        hostile = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
        greeting = struct.pack(">III", 0x48535032, 1, 0) + os.urandom(16)
        hostile[0].sendall(greeting)
        hostile[1].sendall(greeting)
        hostile[2].sendall(struct.pack(">I", 64 << 20) + os.urandom(60))
        t0 = time.monotonic()
        rank1 = start_rank(1, 2, server, key, scope)
        try:  # rank 0 answers greetings once both ranks met at the rendezvous
            hostile[1].settimeout(60)
            if len(hostile[1].recv(48)) == 48:
                hostile[1].sendall(os.urandom(32))
        except OSError:
            pass
        out1, err1 = rank1.communicate(timeout=180)
        out0, err0 = rank0.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        for p in (rank0,):
            if p.poll() is None:
                p.kill()
    assert rank0.returncode == 0 and rank1.returncode == 0, err0 + err1
    init1 = float(out1.split()[1])
    print("rank 1's hvd.init() took %.2f s with 8 hostile connections queued on rank 0's port (job %.1f s)"
          % (init1, elapsed))
    assert "SUM 3" in out0 and "SUM 3" in out1
    assert init1 < 4.0  # a blocking read of each silent connection cost 5 s apiece
    for s in hostile:
        s.close()


def test_a_peer_that_does_not_prove_itself_is_named_in_the_error(service):
    server, key, scope = service
    rank0 = start_rank(0, 2, server, key, scope, {"HOROVOD_START_TIMEOUT": "5"})
    try:
        port = record_of(server, scope, 0)["port"]
        # We pose as rank 1 on another host (so TCP, three channels) without the job's secret.
        pose_as_remote_rank1(server, scope)
        impostor = socket.create_connection(("127.0.0.1", port))
        impostor.sendall(_GREETING_HEADER + struct.pack(">II", 1, 0) + os.urandom(16 + 32))
        assert impostor.recv(48) == b"S"  # refused at once: the greeting's MAC proves no secret
        _, err = rank0.communicate(timeout=120)
    finally:
        if rank0.poll() is None:
            rank0.kill()
    assert rank0.returncode != 0
    assert re.search(r"waiting for rank 1 \([^)]*127\.0\.0\.1\) to connect to rank 0", err), err
    assert "claimed to be rank 1 but did not prove it belongs to this job" in err, err
    assert "shared memory" not in err
    impostor.close()


def test_a_copied_greeting_proves_nothing(service):
    server, key, scope = service
    rank0 = start_rank(0, 2, server, key, scope, {"HOROVOD_START_TIMEOUT": "6"})
    try:
        port = record_of(server, scope, 0)["port"]
        pose_as_remote_rank1(server, scope)
        # Rank 1's greeting as an eavesdropper would have copied it off the wire (made here with
        # the job's token, which the eavesdropper does not have).
        token = hashlib.sha256(key + (scope + ".init.0").encode()).hexdigest().encode()
        nonce, ids = os.urandom(16), struct.pack(">II", 1, 0)
        greeting = _GREETING_HEADER + ids + nonce + hmac.new(token, b"hello" + nonce + ids, hashlib.sha256).digest()
        first = socket.create_connection(("127.0.0.1", port))
        first.sendall(greeting)
        assert len(first.recv(48)) == 48  # challenged: the greeting proves the secret once
        second = socket.create_connection(("127.0.0.1", port))
        second.sendall(greeting)
        assert second.recv(48) == b"D"  # the same nonce again: a replay
        first.sendall(os.urandom(32))  # the copier cannot answer the challenge
        _, err = rank0.communicate(timeout=120)
    finally:
        if rank0.poll() is None:
            rank0.kill()
    assert rank0.returncode != 0
    assert "a greeting as rank 1 proved the job's secret, but its handshake did not complete" in err, err
    assert "1 repeated a greeting already used (a replay)" in err, err
    assert "1 repeated rank 1's greeting but did not answer the challenge" in err, err
    first.close()
    second.close()
